"""The approval policy: who may approve a plan, how many must, which plans approve themselves,
and how long a plan may wait for people before its approval expires.

Pure: ``evaluate`` judges a plan and the approvals recorded for it without I/O; the case service
runs it inside the transaction that locks the case (docs/approvals.md says where each rule bites).
The policy judges the ``ParsedPlan`` (a stored plan is read with ``parse_plan``, the executor's
reading); a plan that does not meet the contract is judged the most cautious way: two approvers,
never automatic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from core.domain.plans import UNSTATED_RISK, ParsedPlan, parsed_or_none
from core.domain.refusal import Refused

AutoApprove = Literal["off", "noop_only", "low_risk"]
AUTO_APPROVE_MODES: tuple[AutoApprove, ...] = ("off", "noop_only", "low_risk")

AUTO_APPROVER = "gatekeeper"
"""The actor an automatic approval is recorded under: it counts only for plans the policy lets
approve themselves, so naming it by hand gains nothing."""

NO_APPROVERS = "no approvers are configured (OPSGATE_APPROVERS)"
"""Why nobody may decide a plan while the approver list is empty: an unset list never widens who
may approve (only what ``OPSGATE_AUTO_APPROVE`` explicitly covers runs without a person)."""

GroupMembers = Callable[[str], Collection[str]]
"""A user group id → its members' user ids. Called inside the case's transaction, so it must
answer from memory (the Slack front end keeps a cache of ``usergroups.users.list``)."""


def _no_groups(_group: str) -> Collection[str]:
    return ()


@dataclass(frozen=True)
class Approval:
    """One approver's yes to one plan, identified by its hash."""

    approver: str
    plan_hash: str


@dataclass(frozen=True)
class Satisfied:
    """Enough distinct, eligible approvers said yes: the plan may run."""

    approvers: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Pending:
    """Every approval so far is valid, but ``needs`` more distinct approvers must say yes."""

    needs: int
    reason: str
    approvers: tuple[str, ...] = ()


Verdict = Satisfied | Pending | Refused
PlanLike = ParsedPlan | Mapping[str, Any]
"""A parsed plan, or a stored plan's JSON, which the policy reads with ``parse_plan``."""


@dataclass(frozen=True)
class ApprovalPolicy:
    """Who may approve and how many must. ``approvers`` holds user ids and/or user group ids;
    empty means nobody may approve (nor reject) until someone is named; the requester never may.
    Automatic approval is its own setting and does not need the list. A plan nobody decided
    ``approval_ttl_s`` seconds after it reached the gate expires."""

    approvers: frozenset[str] = frozenset()
    two_person_risk: float = 0.7
    auto_approve: AutoApprove = "off"
    auto_approve_max_risk: float = 0.3
    members: GroupMembers = field(default=_no_groups, compare=False, repr=False)
    approval_ttl_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.auto_approve not in AUTO_APPROVE_MODES:
            raise ValueError(f"auto_approve must be one of {AUTO_APPROVE_MODES}, "
                             f"not {self.auto_approve!r}")
        for name in ("two_person_risk", "auto_approve_max_risk"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be within 0..1")
        if not (math.isfinite(self.approval_ttl_s) and self.approval_ttl_s > 0):
            raise ValueError("approval_ttl_s must be a positive number of seconds")

    # -- who -------------------------------------------------------------------------------

    def may_approve(self, user: str) -> bool:
        """Whether ``user`` is on the approver list, directly or through a group on it."""
        if user in self.approvers:
            return True
        return any(user in self.members(group) for group in self.approvers)

    def refusal(self, approver: str, requester: str, plan: PlanLike) -> str | None:
        """Why ``approver`` may not decide ``plan`` for ``requester``; None when they may."""
        if approver == AUTO_APPROVER:
            return None if self.auto_approves(plan) else self._no_auto_reason()
        if not self.approvers:
            return f"{NO_APPROVERS}: nobody may decide this plan until someone is named"
        if approver == requester:
            return f"{approver} requested this plan and cannot approve it"
        if not self.may_approve(approver):
            return f"{approver} is not an approver ({self.describe_approvers()} may approve)"
        return None

    def describe_approvers(self) -> str:
        """Who may approve, in words, for refusals and "waiting for approval" notes."""
        if not self.approvers:
            return f"nobody ({NO_APPROVERS})"
        return ", ".join(sorted(self.approvers))

    # -- how many ---------------------------------------------------------------------------

    def required(self, plan: PlanLike) -> int:
        """Distinct approvers ``plan`` needs: two from ``two_person_risk`` up, else one."""
        return 2 if plan_risk(plan) >= self.two_person_risk else 1

    def auto_approves(self, plan: PlanLike) -> bool:
        """Whether the gatekeeper may approve ``plan`` without a human: only a plan that meets
        the contract, judged on exactly the steps and rollback steps the executor would run."""
        parsed = parsed_or_none(plan)
        if self.auto_approve == "off" or parsed is None:
            return False
        if parsed.noop_only:
            return True
        return self.auto_approve == "low_risk" and plan_risk(parsed) < self.auto_approve_max_risk

    def _no_auto_reason(self) -> str:
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

    def evaluate(self, plan: PlanLike, requester: str,
                 approvals: Iterable[Approval]) -> Verdict:
        """Judge ``approvals`` of ``plan`` proposed for ``requester``.

        Approvals of another plan hash do not count; one approver counts once however often
        they approved; any approval by someone who may not approve refuses the lot; a plan that
        does not meet the contract is never approved.
        """
        parsed = parsed_or_none(plan)
        if parsed is None:
            return Refused("the plan does not meet the ChangePlan schema; it cannot be approved")
        digest = parsed.digest
        approvers: list[str] = []
        for approval in approvals:
            if approval.plan_hash != digest or approval.approver in approvers:
                continue
            refused = self.refusal(approval.approver, requester, parsed)
            if refused is not None:
                return Refused(refused)
            approvers.append(approval.approver)
        if AUTO_APPROVER in approvers:
            return Satisfied(tuple(approvers), f"approved by {AUTO_APPROVER} "
                             f"(automatic approval policy: {self.auto_approve})")
        needed = self.required(parsed)
        if len(approvers) >= needed:
            return Satisfied(tuple(approvers), f"approved by {', '.join(approvers)}")
        return Pending(needed - len(approvers), self._pending_reason(parsed, approvers, needed),
                       tuple(approvers))

    def _pending_reason(self, plan: ParsedPlan, approvers: list[str], needed: int) -> str:
        why = (f"risk {plan_risk(plan):g} ≥ {self.two_person_risk:g} needs two distinct "
               "approvers" if needed == 2 else "needs one approver")
        have = f"; approved so far by {', '.join(approvers)}" if approvers else ""
        return f"{why}{have}"


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
