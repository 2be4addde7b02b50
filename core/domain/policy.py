"""The approval policy: who may approve a plan, how many must, which plans approve themselves,
and how long a plan may wait for people before its approval expires.

Cedar decides (``core.policy``): the policies of ``OPSGATE_POLICY``, else the shipped default
rendered from ``OPSGATE_APPROVERS``, ``OPSGATE_TWO_PERSON_RISK`` and ``OPSGATE_AUTO_APPROVE``;
this module asks it about each yes and says its answers in words. Pure: ``evaluate`` judges a
plan and the approvals recorded for it without I/O; the case service runs it inside the
transaction that locks the case (docs/approvals.md says where each rule bites). The policy
judges the ``ParsedPlan`` (a stored plan is read with ``parse_plan``, the executor's reading); a
plan that does not meet the contract is never approved, and people are judged on it as on the
riskiest plan.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, Self

from core.catalog.model import EMPTY_CATALOG, Catalog
from core.domain.plans import UNSTATED_RISK, ParsedPlan, parsed_or_none, plan_hash
from core.domain.refusal import Refused
from core.policy.judge import (
    GATEKEEPER,
    GroupMembers,
    Judgement,
    People,
    Subject,
    judge,
    quorum_for,
    sequence_words,
)
from core.policy.rules import (
    APPROVERS_GROUP,
    REQUESTER_RULE,
    Rules,
    cedar_decimal,
    default_rules,
)
from core.policy.targets import NO_STEP_OWNERS, StepOwners, Target, plan_targets

AutoApprove = Literal["off", "noop_only", "low_risk"]
AUTO_APPROVE_MODES: tuple[AutoApprove, ...] = ("off", "noop_only", "low_risk")

AUTO_APPROVER = GATEKEEPER
"""The actor an automatic approval is recorded under: it counts only for plans the policy lets
approve themselves, so naming it by hand gains nothing."""

NO_APPROVERS = "no approvers are configured (OPSGATE_APPROVERS)"
"""Why nobody may decide a plan while the approver list is empty: an unset list never widens who
may approve (only what ``OPSGATE_AUTO_APPROVE`` explicitly covers runs without a person)."""



def _no_groups(_group: str) -> Collection[str]:
    return ()


@dataclass(frozen=True)
class Approval:
    """One approver's yes to one plan, identified by its hash."""

    approver: str
    plan_hash: str


def _no_catalog() -> Catalog:
    return EMPTY_CATALOG


@dataclass(frozen=True)
class Satisfied:
    """Enough distinct, eligible approvers said yes: the plan may run. ``policies``: the
    permits that admitted them."""

    approvers: tuple[str, ...]
    reason: str
    policies: tuple[str, ...] = field(default=(), compare=False)
    admitted: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Pending:
    """Every approval so far is valid, but ``needs`` more distinct approvers must say yes."""

    needs: int
    reason: str
    approvers: tuple[str, ...] = ()
    policies: tuple[str, ...] = field(default=(), compare=False)
    admitted: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)


Verdict = Satisfied | Pending | Refused
PlanLike = ParsedPlan | Mapping[str, Any]
"""A parsed plan, or a stored plan's JSON, which the policy reads with ``parse_plan``."""


@dataclass(frozen=True)
class ApprovalPolicy:
    """Who may approve and how many must, as Cedar decides it. ``rules``: the policies of
    ``OPSGATE_POLICY``; None: the shipped default for ``approvers`` (user ids and/or user
    group ids; empty means nobody may approve nor reject until someone is named),
    ``two_person_risk`` and ``auto_approve``; ``policies``, when given, answers with the
    policies as they are now. The requester never may. ``catalog`` answers with the catalog as
    it is now; ``members`` with a Slack user group's members. A plan nobody
    decided ``approval_ttl_s`` seconds after it reached the gate expires."""

    approvers: frozenset[str] = frozenset()
    two_person_risk: float = 0.7
    auto_approve: AutoApprove = "off"
    auto_approve_max_risk: float = 0.3
    members: GroupMembers = field(default=_no_groups, compare=False, repr=False)
    approval_ttl_s: float = 3600.0
    rules: Rules | None = field(default=None, compare=False, repr=False)
    catalog: Callable[[], Catalog] = field(default=_no_catalog, compare=False, repr=False)
    policies: Callable[[], Rules] | None = field(default=None, compare=False, repr=False)
    components: tuple[str, ...] = field(default=(), compare=False)  # the case's (``at``)
    now: datetime | None = field(default=None, compare=False)  # None: the clock's time
    step_owners: StepOwners = field(default=NO_STEP_OWNERS, compare=False, repr=False)
    requesters: tuple[str, ...] = field(default=(), compare=False)  # who else asked (``at``)

    def at(self, components: Iterable[str], now: datetime | None,
           requesters: Iterable[str] = ()) -> Self:
        """The policy as it judges a plan of a case naming ``components`` (context only: a
        plan's steps decide whose it is), at ``now``, asked for by ``requesters`` besides its
        proposer (the case's opener, whoever an agent or token acted for)."""
        return replace(self, components=tuple(components), now=now,
                       requesters=tuple(requesters))

    def __post_init__(self) -> None:
        if self.auto_approve not in AUTO_APPROVE_MODES:
            raise ValueError(f"auto_approve must be one of {AUTO_APPROVE_MODES}, "
                             f"not {self.auto_approve!r}")
        for name in ("two_person_risk", "auto_approve_max_risk"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be within 0..1")
            if Decimal(cedar_decimal(getattr(self, name))) != Decimal(repr(getattr(self, name))):
                raise ValueError(f"{name} must have four decimal places at most (Cedar's "
                                 "decimals)")
        if not (math.isfinite(self.approval_ttl_s) and self.approval_ttl_s > 0):
            raise ValueError("approval_ttl_s must be a positive number of seconds")
        if self.rules is None:
            object.__setattr__(self, "rules", default_rules(
                two_person_risk=self.two_person_risk, auto_approve=self.auto_approve,
                auto_approve_max_risk=self.auto_approve_max_risk))

    @property
    def cedar(self) -> Rules:
        """The policies that decide now (the default's when ``OPSGATE_POLICY`` is unset)."""
        if self.policies is not None:
            return self.policies()
        assert self.rules is not None, "__post_init__ sets the rules"
        return self.rules

    @property
    def version(self) -> str:
        """The policy set's version: the hash of the policies, the catalog and the approver
        list (12 hex digits), recorded with every decision."""
        catalog = self.catalog()
        text = "\0".join((self.cedar.version, catalog.version, *sorted(self.approvers)))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def nobody_named(self) -> bool:
        """Whether the default policy decides and names nobody (``OPSGATE_APPROVERS`` empty)."""
        return self.cedar.default and not self.approvers

    def people(self) -> People:
        return People(self.catalog(), self.members, self.approvers, self.cedar.named_groups)

    def subject(self, plan: PlanLike, requester: str) -> Subject:
        """What Cedar judges: the plan (a plan that does not meet the contract: as the riskiest
        plan), everyone who asked for it, what each step changes, and the moment."""
        parsed = parsed_or_none(plan) or _riskiest(plan)
        catalog = self.catalog()
        return Subject(parsed, requester, plan_targets(parsed, catalog, self.step_owners),
                       self.now or datetime.now(UTC), self.requesters,
                       catalog_decides=bool(catalog.components))

    def judge(self, subject: Subject, person: str) -> Judgement:
        return judge(self.cedar, self.people(), subject, person)

    # -- who -------------------------------------------------------------------------------

    def may_approve(self, user: str) -> bool:
        """Whether ``user`` is among the approvers at all: in a group the policies name, or on
        the approver list (directly or through a user group on it)."""
        return bool(self.people().groups_of(user) & (self.cedar.named_groups | {APPROVERS_GROUP}))

    def refusal(self, approver: str, requester: str, plan: PlanLike) -> str | None:
        """Why ``approver`` may not decide ``plan`` for ``requester``; None when they may."""
        subject = self.subject(plan, requester)
        judged = self.judge(subject, approver)
        if judged.allowed:
            return None
        return self.refusal_words(approver, subject, judged)

    def refusal_words(self, person: str, subject: Subject, judged: Judgement) -> str:
        """Why Cedar's ``judged`` answer refuses ``person`` on ``subject``, in words."""
        if person == AUTO_APPROVER:
            return self._no_auto_reason(judged)
        if self.nobody_named:
            return f"{NO_APPROVERS}: nobody may decide this plan until someone is named"
        if REQUESTER_RULE in judged.forbids:
            return f"{person} requested this plan and cannot approve it"
        if subject.unowned:
            return f"{person} may not approve this plan: {unowned_words(subject.unowned)}"
        if judged.forbids:
            return f"{person} may not approve this plan: {self._forbidden(judged.forbids)}"
        if self.cedar.default:
            return f"{person} is not an approver ({self.describe_approvers()} may approve)"
        if judged.refused_on:  # the step that refused them, in words
            target = judged.refused_on[0]
            return (f"{person} may not approve this plan: {target.step.label} changes "
                    f"{target.what}: {self.describe_who(subject.on(target))}")
        return f"{person} may not approve this plan: {self.describe_who(subject)}"

    def _forbidden(self, names: Iterable[str]) -> str:
        rules = self.cedar.named(tuple(names))
        said = "; ".join(f"policy {rule.name}" + (f" ({rule.reason})" if rule.reason else "")
                         for rule in rules)
        return f"refused by {said}"

    def describe_approvers(self) -> str:
        """Who may approve, in words, for refusals and "waiting for approval" notes."""
        if self.nobody_named:
            return f"nobody ({NO_APPROVERS})"
        if self.cedar.default:
            return ", ".join(sorted(self.approvers))
        named = sorted(name for name in self.cedar.named_groups if name != APPROVERS_GROUP)
        owners = any(rule.effect == "permit" and rule.on_owners
                     for rule in self.cedar.rules.values())
        said = [*named, *(["the owners of what a plan touches"] if owners else [])]
        return sequence_words(said) if said else "nobody"

    def describe_who(self, subject: Subject) -> str:
        """Who may approve ``subject``'s plan, as a sentence: "only payments-oncall may approve
        changes to payments-api"."""
        if subject.unowned:
            return unowned_words(subject.unowned)
        who = list(quorum_for(self.cedar, self.people(), subject).who)
        touched = sequence_words([c.name for c in subject.components])
        changes = f" changes to {touched}" if touched else " this plan"
        if not who:
            return f"no policy lets anyone approve{changes}"
        return f"only {sequence_words(who)} may approve{changes}"

    # -- how many ---------------------------------------------------------------------------

    def required(self, plan: PlanLike) -> int:
        """Distinct approvers ``plan`` needs before anyone said yes: the highest ``@quorum``
        among the permits that could admit someone (the default: two from
        ``two_person_risk`` up, else one)."""
        return quorum_for(self.cedar, self.people(), self.subject(plan, "")).needed

    def auto_approves(self, plan: PlanLike) -> bool:
        """Whether the gatekeeper may approve ``plan`` without a human: only a plan that meets
        the contract, judged on exactly the steps and rollback steps the executor would run."""
        if parsed_or_none(plan) is None:
            return False
        return self.judge(self.subject(plan, ""), AUTO_APPROVER).allowed

    def _no_auto_reason(self, judged: Judgement) -> str:
        if judged.forbids:
            return f"automatic approval is {self._forbidden(judged.forbids)}"
        if not self.cedar.default:
            return "no policy permits automatic approval of this plan"
        if self.auto_approve == "off":
            return "automatic approval is off"
        if self.auto_approve == "noop_only":
            return "automatic approval covers noop-only plans; this plan changes something"
        return (f"automatic approval covers noop-only plans and risk below "
                f"{self.auto_approve_max_risk:g}; this plan is riskier")

    # -- how long ---------------------------------------------------------------------------

    def approval_expires_at(self, at_gate: datetime) -> datetime:
        """When the approval of a plan that reached the gate at ``at_gate`` expires."""
        return at_gate + timedelta(seconds=self.approval_ttl_s)

    def describe_ttl(self) -> str:
        """How long a plan may wait at the gate, in words ("1 h", "30 min", "45 s")."""
        return duration_words(self.approval_ttl_s)

    # -- the verdict ------------------------------------------------------------------------

    def evaluate(self, plan: PlanLike, requester: str, approvals: Iterable[Approval]) -> Verdict:
        """Judge ``approvals`` of ``plan`` proposed for ``requester``.

        Approvals of another plan hash do not count; one approver counts once however often
        they approved; any approval by someone who may not approve refuses the lot; a plan that
        does not meet the contract is never approved. Enough is the highest ``@quorum`` among
        the permits that admitted the yeses counted (before any: ``required``).
        """
        parsed = parsed_or_none(plan)
        if parsed is None:
            return Refused("the plan does not meet the ChangePlan schema; it cannot be approved")
        subject = self.subject(parsed, requester)
        admitted: dict[str, tuple[str, ...]] = {}
        quorum = 1
        for approval in approvals:
            if approval.plan_hash != parsed.digest or approval.approver in admitted:
                continue
            judged = self.judge(subject, approval.approver)
            if not judged.allowed:
                return Refused(self.refusal_words(approval.approver, subject, judged),
                               policies=judged.forbids)
            admitted[approval.approver] = judged.permits
            quorum = max(quorum, judged.quorum)
        return self._verdict(subject, admitted, quorum)

    def _verdict(self, subject: Subject, admitted: Mapping[str, tuple[str, ...]],
                 quorum: int) -> Verdict:
        approvers = tuple(admitted)
        permits = tuple(dict.fromkeys(p for named in admitted.values() for p in named))
        if AUTO_APPROVER in approvers:
            why = (f"automatic approval policy: {self.auto_approve}" if self.cedar.default
                   else f"policy {', '.join(permits)}")
            return Satisfied(approvers, f"approved by {AUTO_APPROVER} ({why})", permits,
                             admitted)
        if not approvers:
            standing = quorum_for(self.cedar, self.people(), subject)
            quorum, permits = standing.needed, standing.permits
        if len(approvers) >= quorum:
            return Satisfied(approvers, f"approved by {', '.join(approvers)}", permits,
                             admitted)
        return Pending(quorum - len(approvers),
                       self._pending_reason(subject, approvers, quorum, permits),
                       approvers, permits, admitted)

    def _pending_reason(self, subject: Subject, approvers: tuple[str, ...], needed: int,
                        permits: tuple[str, ...]) -> str:
        count = "one approver" if needed == 1 else f"{number_words(needed)} distinct approvers"
        if self.cedar.default:
            why = (f"risk {plan_risk(subject.plan):g} ≥ {self.two_person_risk:g} needs {count}"
                   if needed > 1 else f"needs {count}")
        else:
            why = f"needs {count} (policy {', '.join(permits)})" if permits else f"needs {count}"
        have = f"; approved so far by {', '.join(approvers)}" if approvers else ""
        return f"{why}{have}"


def unowned_words(unowned: Iterable[Target]) -> str:
    """The steps nobody owns, as a sentence: "step 2 (http.request) changes the service behind
    POST https://…, which no catalog component owns: nobody may approve it"."""
    said = [target.sentence for target in unowned]
    return f"{'; '.join(said)}: nobody may approve {'it' if len(said) == 1 else 'them'}"


def number_words(count: int) -> str:
    """A count of people as a sentence says it: "two", "twelve" as 12."""
    words = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    return words[count] if count < len(words) else str(count)


def _riskiest(plan: PlanLike) -> ParsedPlan:
    """How people are judged on a plan that does not meet the contract: as the riskiest plan,
    changing something unknown."""
    try:
        digest = plan_hash(dict(plan) if isinstance(plan, Mapping) else {})
    except (TypeError, ValueError):
        digest = "unreadable"
    return ParsedPlan(title="", risk=UNSTATED_RISK, steps=(), rollback=(), verify={},
                      digest=digest)



def duration_words(seconds: float) -> str:
    """A duration as people say it: hours from an hour up, minutes from a minute up."""
    for unit, size in (("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{round(seconds / size, 2):g} {unit}"
    return f"{round(seconds, 2):g} s"


def plan_risk(plan: PlanLike) -> float:
    """The plan's risk, failing closed: a plan that does not say, does not meet the contract, or
    says something that is not a number within 0..1 (NaN compares false with every bound)
    counts as the riskiest."""
    parsed = parsed_or_none(plan)
    if parsed is None:
        return UNSTATED_RISK
    risk = parsed.risk
    return risk if math.isfinite(risk) and 0 <= risk <= 1 else UNSTATED_RISK


def noop_only(plan: PlanLike) -> bool:
    """Whether every step and every rollback step of ``plan`` is a ``noop`` (a plan that does
    not meet the contract is not)."""
    parsed = parsed_or_none(plan)
    return parsed is not None and parsed.noop_only
