"""The gate: the one module that decides a decision on the plan a case waits on — may this person
(or the gatekeeper) approve or reject it now, is the gate decided, has its approval expired.

The case service asks it once per decision, inside the transaction that locks the case, and
writes the rows it rules; the Slack front end asks the same rules through the service
(``CaseService.may_reject``). The policy itself (who, how many, how long) is the pure
``core.domain.policy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from sqlalchemy import Connection

from core.clock import Clock
from core.db import case_store as store
from core.domain.fsm import CaseStatus
from core.domain.policy import Approval, ApprovalPolicy, Pending, Satisfied, Verdict
from core.domain.refusal import Refused
from core.domain.views import ApprovalDecision, ApprovalState, GateVerdict
from core.errors import (
    ApprovalRefused,
    GuardFailed,
    IllegalTransition,
    OpsgateError,
    StalePlan,
    VersionConflict,
)

Row = Mapping[Any, Any]


@dataclass(frozen=True)
class Ruling:
    """The gate's answer to one yes: the plan, the verdict on this proposal's yeses with this
    one, and this yes's ``plan_approved`` row (None when the approver had said yes before, or
    is refused: nothing new to record)."""

    plan: Row
    verdict: Verdict
    approval: dict[str, Any] | None

    @property
    def plan_hash(self) -> str:
        return str(self.plan["plan_hash"])

    def state(self) -> ApprovalState:
        """What an approval reply says about the gate: approved, or pending and how many more."""
        return approval_state(self.verdict, recorded=self.approval is not None)

    def admitted(self) -> str:
        """The plan's hash when the gate is decided; else the ``gate_approved`` guard's refusal
        (``ApprovalRefused``, or ``GuardFailed`` while more approvers are needed)."""
        if isinstance(self.verdict, Refused):
            reason = self.verdict.reason
            raise ApprovalRefused(reason, problems=[f"approver: {reason}"])
        if isinstance(self.verdict, Pending):
            raise GuardFailed(f"the approvals do not satisfy the policy yet: {self.verdict.reason}",
                              problems=[f"approvals: {self.verdict.needs} more distinct "
                                        "approver(s) needed"])
        return self.plan_hash


@dataclass(frozen=True)
class Gate:
    """The gate as one case service keeps it: judged by its approval policy, stamped by its
    clock. Every method runs on the caller's connection, the case row already locked (or, for
    ``may_reject``, read)."""

    policy: ApprovalPolicy
    clock: Clock

    def waiting(self, conn: Connection, case: Row, digest: str, *,
                expected_version: int | None, event: str) -> Row:
        """The plan the case waits on, when a decision naming ``digest``, made on the case at
        ``expected_version``, may be taken now. ``IllegalTransition`` outside the gate (saying
        whether this plan was decided or its approval expired), ``VersionConflict`` on an
        outdated view, then ``waited_plan``'s refusals."""
        status, version = CaseStatus(case["status"]), int(case["version"])
        if status is not CaseStatus.WAIT_GATE:
            raise IllegalTransition(f"the case is {status}, not waiting at the gate: "
                                    f"{_why_closed(conn, case['id'], digest)}",
                                    status=str(status), event=event)
        if expected_version is not None and expected_version != version:
            raise VersionConflict(
                f"case is at version {version}, not {expected_version}: the decision was "
                "made on an outdated view", expected_version=expected_version, version=version)
        return waited_plan(conn, case["id"], digest)

    def approval(self, conn: Connection, plan: Row, approver: str) -> Ruling:
        """``approver``'s yes to ``plan``, judged once with the yeses recorded for this proposal:
        a yes said before counts once and records nothing new."""
        approvals = recorded_approvals(conn, plan)
        fresh = approver not in {approval.approver for approval in approvals}
        if fresh:
            approvals.append(Approval(approver, str(plan["plan_hash"])))
        verdict = self.policy.evaluate(plan["plan"], str(plan["proposed_by"]), approvals)
        row = None
        if fresh and not isinstance(verdict, Refused):
            row = decision_row(plan, approver, "approved", self.clock())
        return Ruling(plan, verdict, row)

    def refusal(self, plan: Row, person: str) -> str | None:
        """Why ``person`` may not decide ``plan`` at all (the requester, not an approver, an
        ineligible gatekeeper); None when they may."""
        return self.policy.refusal(person, str(plan["proposed_by"]), plan["plan"])

    def rejection(self, plan: Row, approver: str, reason: str | None) -> dict[str, Any]:
        """``approver``'s no to ``plan`` as its ``plan_approved`` row; ``ApprovalRefused`` when
        they may not decide it."""
        refused = self.refusal(plan, approver)
        if refused is not None:
            raise ApprovalRefused(refused, problems=[f"approver: {refused}"])
        return decision_row(plan, approver, "rejected", self.clock(), reason)

    def expiry(self, case: Row, plan: Row, actor: str, reason: str | None) -> dict[str, Any]:
        """The expiry of ``plan``'s approval as its ``plan_approved`` row, once it has waited the
        policy's TTL since it reached the gate (the case's last move); ``GuardFailed`` before."""
        due = self.policy.approval_expires_at(store.as_utc(case["updated_at"]))
        now = self.clock()
        ttl = self.policy.describe_ttl()
        if now < due:
            raise GuardFailed(
                f"the plan's approval expires at {due:%Y-%m-%d %H:%M:%S} UTC, "
                f"{ttl} after it reached the gate; not before",
                problems=[f"expires_at: {due.isoformat()}"])
        return decision_row(plan, actor, "expired", now, reason or f"approval expired after {ttl}")

    def may_reject(self, conn: Connection, case: Row, digest: str, person: str, *,
                   expected_version: int | None) -> bool:
        """Whether ``person``'s no to the plan ``digest`` names, made on the case at
        ``expected_version``, would be taken now: the very checks ``reject_plan`` makes."""
        try:
            plan = self.waiting(conn, case, digest, expected_version=expected_version,
                                event="gate_rejected")
        except OpsgateError:
            return False
        return self.refusal(plan, person) is None

    def standing(self, conn: Connection, plan: Row) -> Verdict:
        """The verdict on the yeses recorded for ``plan`` so far (nobody deciding now)."""
        return self.policy.evaluate(plan["plan"], str(plan["proposed_by"]),
                                    recorded_approvals(conn, plan))


def _why_closed(conn: Connection, case_id: UUID, digest: str) -> str:
    """Why a decision on ``digest`` comes too late: the plan was decided, its approval expired,
    or the decision names an older plan."""
    latest = store.latest_plan(conn, case_id)
    if latest is None or latest["plan_hash"] != digest:
        return "this decision is for an older plan"
    expired = expiry_of(conn, latest)
    if expired is not None:
        return f"{expired} — ask the agent for a fresh plan"
    return "this plan was already decided"


def waited_plan(conn: Connection, case_id: UUID, digest: str | None, *,
                hash_required: bool = True) -> Row:
    """The plan the case waits on at the gate, which ``digest`` must name.

    ``StalePlan`` when ``digest`` names an older plan of the case (a click on an old message) or
    none of its plans; ``GuardFailed`` when no plan was ever proposed. A rejection sent without
    a hash (``hash_required=False``) concerns the latest plan.
    """
    latest = store.latest_plan(conn, case_id)
    if latest is None:
        raise GuardFailed("there is no proposed plan to decide on", problems=["plan: missing"])
    current = str(latest["plan_hash"])
    if digest is None and not hash_required:
        return latest
    if digest != current:
        older = digest is not None and store.plan_by_hash(conn, case_id, digest) is not None
        message = ("this approval is for an older plan; the case now waits on plan "
                   f"{current[:12]}" if older
                   else "the decision does not name the plan the case waits on")
        raise StalePlan(message, problems=[f"plan_hash: expected {current}, got {digest}"],
                        plan_hash=current)
    return latest


def recorded_approvals(conn: Connection, plan: Row) -> list[Approval]:
    """The yeses recorded for this proposal of the plan (a re-proposal starts from none)."""
    return [Approval(str(decision["approver"]), str(plan["plan_hash"]))
            for decision in store.plan_decisions(conn, plan["id"])
            if decision.get("verdict", "approved") == "approved" and "approver" in decision]


def expiry_of(conn: Connection, plan: Row) -> str | None:
    """Why this proposal's approval expired (its expiry's reason); None when it did not."""
    for decision in store.plan_decisions(conn, plan["id"]):
        if decision.get("verdict") == "expired":
            return str(decision.get("reason") or "its approval expired")
    return None


def decision_row(plan: Row, approver: str, verdict: GateVerdict, at: datetime,
                 reason: str | None = None) -> dict[str, Any]:
    """The ``plan_approved`` row of one approver's decision on one proposal (or of its expiry,
    recorded under the gatekeeper)."""
    decision: ApprovalDecision = {"approver": approver, "at": at.isoformat(), "verdict": verdict}
    if reason is not None:
        decision["reason"] = reason
    return {"id": uuid4(), "case_id": plan["case_id"], "plan_id": plan["id"],
            "plan_hash": plan["plan_hash"], "decision": decision}


def approval_state(verdict: Verdict, *, recorded: bool) -> ApprovalState:
    """What an approval reply says about the gate: approved, or pending and how many more."""
    if isinstance(verdict, Satisfied):
        return {"state": "approved", "approvers": list(verdict.approvers), "needs": 0,
                "recorded": recorded, "reason": verdict.reason}
    if isinstance(verdict, Pending):
        return {"state": "pending", "approvers": list(verdict.approvers),
                "needs": verdict.needs, "recorded": recorded, "reason": verdict.reason}
    return {"state": "refused", "approvers": [], "needs": None, "recorded": False,
            "reason": verdict.reason}
