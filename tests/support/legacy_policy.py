"""The hand-written approval rules opsgate decided by before Cedar (issue 27), kept only as the
oracle of the differential test (tests/unit/domain/test_policy_differential.py): the shipped
default Cedar policy must decide exactly as these did. Copied from core/domain/policy.py at
9cfb676; never used by the product."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from core.domain.plans import ParsedPlan, parsed_or_none
from core.domain.policy import (
    AUTO_APPROVE_MODES,
    AUTO_APPROVER,
    NO_APPROVERS,
    Approval,
    AutoApprove,
    Pending,
    PlanLike,
    Satisfied,
    Verdict,
    plan_risk,
)
from core.domain.refusal import Refused
from core.policy.judge import GroupMembers


def _no_groups(_group: str) -> Collection[str]:
    return ()


@dataclass(frozen=True)
class LegacyPolicy:
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
