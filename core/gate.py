"""The gate's bookkeeping inside a case transaction: which plan the case waits on, the approvals
recorded for it, and the decision row an approver's yes or no (or the plan's expiry) writes.

The case service calls these with the case row locked; the policy itself (who, how many) is the
pure ``core.domain.policy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid4

from sqlalchemy import Connection

from core.db import case_store as store
from core.domain.policy import Approval, Pending, Satisfied, Verdict
from core.errors import GuardFailed, StalePlan

Row = Mapping[Any, Any]
GateVerdict = Literal["approved", "rejected", "expired"]
"""What one ``plan_approved`` row records: a yes, a no, or the plan's expiry."""


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
    decision: dict[str, Any] = {"approver": approver, "at": at.isoformat(), "verdict": verdict}
    if reason is not None:
        decision["reason"] = reason
    return {"id": uuid4(), "case_id": plan["case_id"], "plan_id": plan["id"],
            "plan_hash": plan["plan_hash"], "decision": decision}


def approval_state(verdict: Verdict, *, recorded: bool) -> dict[str, Any]:
    """What an approval reply says about the gate: approved, or pending and how many more."""
    if isinstance(verdict, Satisfied):
        return {"state": "approved", "approvers": list(verdict.approvers), "needs": 0,
                "recorded": recorded, "reason": verdict.reason}
    if isinstance(verdict, Pending):
        return {"state": "pending", "approvers": list(verdict.approvers),
                "needs": verdict.needs, "recorded": recorded, "reason": verdict.reason}
    return {"state": "refused", "approvers": [], "needs": None, "recorded": False,
            "reason": verdict.reason}
