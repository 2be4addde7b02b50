"""``POST /gate/eval``: the gatekeeper's one step on the plan the case waits on, now, and the
answer: the case approved, or unchanged with what the gate still needs."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from core.api.walkthrough.consumers import Consumers
from core.api.walkthrough.once import Caller, caller_run, once
from core.cases.replies import Reply
from core.cases.timeline import facts_as
from core.consumers.runs import CommandRun
from core.domain.commands import ApprovePlan
from core.domain.fsm import CaseStatus
from core.domain.messages import AwaitingApprovalFacts


def evaluate_gate(loop: Consumers, case_id: UUID, caller: Caller) -> Reply[Any]:
    """The gatekeeper's verdict now: the plan approved automatically when the policy lets it
    (recorded as the gatekeeper's, never the caller's), else who must still approve."""
    return once(loop.app, caller, "/gate/eval", case_id, {},
                lambda: _evaluate(loop, case_id, caller))


def _evaluate(loop: Consumers, case_id: UUID, caller: Caller) -> Reply[Any]:
    cases = loop.app.cases
    run = caller_run(cases, caller, case_id, CaseStatus.WAIT_GATE, "POST /gate/eval")
    if isinstance(run, Reply):
        return run
    verdict = loop.gatekeeper.evaluate(run, caller.correlation_id, caller.attribution)
    if isinstance(verdict, ApprovePlan):
        return cases.approve_plan(verdict, f"{run.key}:approve")
    noted = cases.note(verdict, f"{run.key}:awaiting_approval").data()
    case = {key: value for key, value in noted.items() if key != "note"}
    pending = {**_pending(loop, run, str(verdict.reason)),
               "expires_at": facts_as(verdict.meta, AwaitingApprovalFacts).get("expires_at")}
    return Reply.of_data({**case, "plan_hash": run.plan_hash, "approval": pending})


def _pending(loop: Consumers, run: CommandRun, waiting: str) -> dict[str, Any]:
    """What the gate still needs: where it stands on the yeses so far, who may give the rest,
    why the plan does not approve itself, and where people approve."""
    cases = loop.app.cases
    status = cases.gate_status(run.case_id, run.plan_hash)
    assert status is not None, "a case waits at the gate on a stored plan"
    return {"state": status.state, "approvers": list(status.approvers),
            "needs": status.needs, "reason": status.reason, "requester": status.requester,
            "eligible": cases.policy.describe_approvers(),
            "automatic": status.automatic, "waiting": waiting,
            "use": f"POST /case/{run.case_id}/approve"}
