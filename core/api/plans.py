"""``POST /plan/generate``: proposes a plan from the template catalog by running ``plan_ready``
through the case service, like any other transition, as the caller's principal (who is then the
plan's requester, and may not approve it)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from core.api.deps import Cases, Writer
from core.api.headers import CorrelationIdHeader, correlation_id
from core.api.openapi import documented
from core.api.replies import send_reply
from core.api.schemas import CaseReply, GeneratePlanBody
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent
from core.domain.plan_templates import load_template

router = APIRouter(tags=["plans"])


@router.post("/plan/generate",
             responses=documented(CaseReply, 400, 401, 403, 404, 409, 413, 422))
def generate_plan(body: GeneratePlanBody, write: Writer, cases: Cases,
                  x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Attach the template's ChangePlan and move the case PLANNING → WAIT_GATE; the reply
    carries the plan hash an approval must name. An unknown template is 404."""
    plan = load_template(body.template)
    cmd = TransitionCase(case_id=body.case_id, event=CaseEvent.PLAN_READY, actor=write.actor,
                         correlation_id=correlation_id(x_correlation_id), plan=plan,
                         attribution=write.attribution(body.actor))
    return send_reply(cases.transition(cmd, write.key))
