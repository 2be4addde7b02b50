"""The approval rows of a proposed plan (``plan_approved``): the plan a decision must name, one
decision's row, the yeses recorded, and ``GateStatus`` — where the gate stands for a plan, read
from those rows. The gate (``core.cases.gate``) decides; this module reads and shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict
from uuid import UUID, uuid4

from sqlalchemy import Connection

from core.cases.rows import case_components
from core.db import case_store as store
from core.domain.fsm import CaseStatus
from core.domain.policy import AUTO_APPROVER, Approval, ApprovalPolicy, Pending, Satisfied, Verdict
from core.domain.views import ApprovalDecision, ApprovalState, DecisionKind
from core.errors import GuardFailed, StalePlan

Row = Mapping[Any, Any]
GateState = Literal["pending", "approved", "rejected", "expired", "refused"]


class DecisionRow(TypedDict):
    """One ``plan_approved`` row: a decision on one proposal of a plan."""

    id: UUID
    case_id: UUID
    plan_id: UUID
    plan_hash: str
    decision: ApprovalDecision
    policies: list[str] | None  # the policies that admitted it (None: not judged by one)
    policy_version: str | None


@dataclass(frozen=True)
class GateStatus:
    """Where the gate stands for one proposal of a plan, read from its approval rows.

    ``state``: ``approved`` (the yeses satisfy the policy), ``pending`` (``needs`` more distinct
    approvers), ``rejected`` (``rejected_by`` said no), ``expired`` (nobody decided in time) or
    ``refused`` (the yeses recorded do not count under the policy as it is now)."""

    case_id: UUID
    plan_hash: str
    requester: str  # who proposed the plan: they may not approve it
    state: GateState
    approvers: tuple[str, ...]  # the yeses the policy counts (none when it refuses them)
    recorded: tuple[str, ...]  # every yes recorded for this proposal, oldest first
    needed: int  # distinct approvers the plan needs in all
    needs: int | None  # how many more must say yes; 0 when approved, None when refused
    reason: str  # the verdict's reason, the no's, or the expiry's
    rejected_by: str | None = None
    automatic: str | None = None  # why the plan does not approve itself; None: it does
    expires_at: datetime | None = None  # while the case waits at the gate on this plan
    decided_at: str | None = None  # when the gate closed: the no, the expiry or the last yes
    last_yes_at: str | None = None  # when the latest yes was recorded (ISO 8601, UTC)

    @property
    def decided(self) -> bool:
        """Whether the gate is closed for this proposal: approved, rejected or expired."""
        return self.state in ("approved", "rejected", "expired")


def gate_status(conn: Connection, policy: ApprovalPolicy, case: Row, plan: Row) -> GateStatus:
    """Where the gate stands for ``plan`` (a ``plan_proposed`` row of ``case``) under
    ``policy``: the verdict on the yeses recorded for it, unless a no or its expiry closed it."""
    decisions = store.plan_decisions(conn, plan["id"])
    requester = str(plan["proposed_by"])
    yeses = recorded_approvals(decisions, plan)
    policy = policy.at(case_components(case), None, requesters_of(conn, case, plan))
    verdict = policy.evaluate(plan["plan"], requester, yeses)
    standing = approval_state(verdict, recorded=False)
    state: GateState = standing["state"]
    reason, rejected_by = standing["reason"], None
    no = next((d for d in decisions if d.get("verdict") == "rejected"), None)
    expired = expiry_of(decisions)
    last_yes_at = _last_yes_at(decisions)
    decided_at = last_yes_at if state == "approved" else None
    if no is not None:
        state, reason, rejected_by = "rejected", no.get("reason", ""), no["approver"]
        decided_at = no.get("at")
    elif expired is not None:
        state, reason = "expired", expired
        decided_at = next(d.get("at") for d in decisions if d.get("verdict") == "expired")
    return GateStatus(
        case_id=plan["case_id"], plan_hash=str(plan["plan_hash"]), requester=requester,
        state=state, approvers=tuple(standing["approvers"]),
        recorded=tuple(dict.fromkeys(yes.approver for yes in yeses)),
        needed=policy.required(plan["plan"]), needs=standing["needs"], reason=reason,
        rejected_by=rejected_by, automatic=policy.refusal(AUTO_APPROVER, requester, plan["plan"]),
        expires_at=_expires_at(conn, policy, case, plan, state), decided_at=decided_at,
        last_yes_at=last_yes_at)


def requesters_of(conn: Connection, case: Row, plan: Row) -> tuple[str, ...]:
    """Everyone who asked for ``plan``, its proposer first: who opened the case, who moved it
    to the gate, and whoever a token said it acted for (a stated actor) in either. The "never
    the requester" rule refuses them all: a person who opened a case and had a service token
    propose the plan still asked for it."""
    asked = [str(plan["proposed_by"])]
    for actor, stated in store.requesters(conn, case["id"], str(plan["plan_hash"])):
        asked += [actor] if stated is None else [actor, stated]
    return tuple(dict.fromkeys(asked))


def _last_yes_at(decisions: Sequence[ApprovalDecision]) -> str | None:
    """When the latest yes among ``decisions`` was recorded; None before any."""
    yeses = [d for d in decisions if d.get("verdict", "approved") == "approved"]
    return yeses[-1].get("at") if yeses else None


def _expires_at(conn: Connection, policy: ApprovalPolicy, case: Row, plan: Row,
                state: GateState) -> datetime | None:
    """When the plan's approval expires: while the case waits at the gate on it, undecided."""
    if case["status"] != CaseStatus.WAIT_GATE or state in ("approved", "rejected", "expired"):
        return None
    latest = store.latest_plan(conn, case["id"])
    if latest is None or latest["id"] != plan["id"]:
        return None
    return policy.approval_expires_at(store.as_utc(case["updated_at"]))


def why_closed(conn: Connection, case_id: UUID, digest: str) -> str:
    """Why a decision on ``digest`` comes too late: the plan was decided, its approval expired,
    or the decision names an older plan."""
    latest = store.latest_plan(conn, case_id)
    if latest is None or latest["plan_hash"] != digest:
        return "this decision is for an older plan"
    expired = expiry_of(store.plan_decisions(conn, latest["id"]))
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


def recorded_approvals(decisions: Sequence[ApprovalDecision], plan: Row) -> list[Approval]:
    """The yeses among ``decisions`` of this proposal of the plan (a re-proposal starts from
    none)."""
    return [Approval(str(decision["approver"]), str(plan["plan_hash"]))
            for decision in decisions
            if decision.get("verdict", "approved") == "approved" and "approver" in decision]


def expiry_of(decisions: Sequence[ApprovalDecision]) -> str | None:
    """Why this proposal's approval expired (its expiry's reason); None when it did not."""
    for decision in decisions:
        if decision.get("verdict") == "expired":
            return str(decision.get("reason") or "its approval expired")
    return None


def decision_row(plan: Row, approver: str, kind: DecisionKind, at: datetime,
                 reason: str | None = None, *, policies: Sequence[str] | None = None,
                 policy_version: str | None = None) -> DecisionRow:
    """The ``plan_approved`` row of one approver's decision on one proposal (or of its expiry,
    recorded under the gatekeeper), with the policies that admitted it and their version."""
    decision: ApprovalDecision = {"approver": approver, "at": at.isoformat(), "verdict": kind}
    if reason is not None:
        decision["reason"] = reason
    return {"id": uuid4(), "case_id": plan["case_id"], "plan_id": plan["id"],
            "plan_hash": str(plan["plan_hash"]), "decision": decision,
            "policies": None if policies is None else list(policies),
            "policy_version": policy_version}


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
