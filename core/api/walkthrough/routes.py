"""The walkthrough's endpoints: ``POST /gate/eval``, ``/adapter/exec`` and ``/verify/run`` ask
the loop's gatekeeper, executor and verifier to take their one step on one case now, as the
caller's principal. The API parses, admits and sends the answer; people still decide at the
gate only through ``POST /case/{id}/approve`` and ``/reject``."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Request, Response

from core.api.deps import Write, Writer, in_scope, opsgate
from core.api.headers import CorrelationIdHeader, correlation_id
from core.api.openapi import documented
from core.api.replies import send_reply
from core.api.schemas import ExecBody, ExecReply, GateReply, StageBody, VerifyReply
from core.api.walkthrough import execute, gate, verify
from core.api.walkthrough.consumers import Consumers
from core.api.walkthrough.execute import OffPlan
from core.api.walkthrough.once import Caller

router = APIRouter(tags=["walkthrough"])

STAGE_STATUSES = (400, 401, 403, 404, 409, 413, 422)


def consumers(request: Request) -> Consumers:
    """The consumers the API's app runs the walkthrough through, kept for the app's life."""
    state = request.app.state
    if getattr(state, "walkthrough", None) is None:
        state.walkthrough = Consumers(opsgate(request))
    found: Consumers = state.walkthrough
    return found


Loop = Annotated[Consumers, Depends(consumers)]


def caller(loop: Consumers, write: Write, case_id: UUID,
           x_correlation_id: str | None) -> Caller:
    """The caller of a stage on ``case_id``: 404 when the case is outside its scope."""
    in_scope(loop.app.cases, write.principal, case_id)
    return Caller(write.actor, write.principal.name, write.key,
                  correlation_id(x_correlation_id))


@router.post("/gate/eval", responses=documented(GateReply, *STAGE_STATUSES))
def evaluate_gate(body: StageBody, write: Writer, loop: Loop,
                  x_correlation_id: CorrelationIdHeader = None) -> Response:
    """The gatekeeper's verdict on the plan the case waits on, now. When the approval policy
    lets the plan approve itself (OPSGATE_AUTO_APPROVE) it is approved, as the gatekeeper's
    approval, never the caller's, and the case moves to EXECUTING; else 200 with the case
    unchanged and what is missing (how many approvals, by whom), noted on the timeline."""
    who = caller(loop, write, body.case_id, x_correlation_id)
    return send_reply(gate.evaluate_gate(loop, body.case_id, who))


@router.post("/adapter/exec", responses=documented(ExecReply, *STAGE_STATUSES))
def execute_next_step(body: ExecBody, write: Writer, loop: Loop,
                      x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Run the approved plan's next step through the gateway, as the executor does (retries,
    one timeline note per attempt). After the last step the case moves to VERIFYING
    (exec_done); a step that fails for good runs the plan's rollback and parks the case
    (exec_failed). The body names no adapter, script or parameters: those are 422 off_plan."""
    if body.off_plan:
        raise OffPlan("POST /adapter/exec runs only the approved plan's next step; it takes no "
                      f"adapter, script or parameters (got: {', '.join(body.off_plan)})",
                      problems=[f"body.{name}: not accepted" for name in body.off_plan])
    who = caller(loop, write, body.case_id, x_correlation_id)
    return send_reply(execute.execute_next_step(loop, body.case_id, who, body.action))


_VERIFY_RESPONSES: dict[int | str, Any] = {
    **documented(VerifyReply, *STAGE_STATUSES),
    202: {"model": VerifyReply, "description": "The verification waits: for the block's "
          "window after the change, or for its condition, until the deadline. The case is "
          "unchanged; the next reading is scheduled."},
}


@router.post("/verify/run", responses=_VERIFY_RESPONSES)
def verify_now(body: StageBody, write: Writer, loop: Loop,
               x_correlation_id: CorrelationIdHeader = None) -> Response:
    """One reading of the executed plan's verify block, as the verifier takes it: held →
    verify_pass (CLOSED); the deadline passed or never judgeable → verify_failed (PARKED);
    otherwise 202 with what it waits on, when the window and the deadline end."""
    who = caller(loop, write, body.case_id, x_correlation_id)
    return send_reply(verify.verify_now(loop, body.case_id, who))
