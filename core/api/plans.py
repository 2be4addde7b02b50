"""``POST /plan/generate``: proposes a plan from the template catalog by running ``plan_ready``
through the case service, like any other transition, as the caller's principal (who is then the
plan's requester, and may not approve it). On a case still ANALYZING (the seed's walkthrough
generates right after ``start_analysis``) it first concludes the analysis (``analysis_done``):
both moves are on the timeline."""

from __future__ import annotations

from fastapi import APIRouter, Response

from core.api.deps import Cases, Write, Writer, in_scope
from core.api.headers import CorrelationIdHeader, correlation_id
from core.api.openapi import documented
from core.api.replies import send_reply
from core.api.schemas import CaseReply, GeneratePlanBody
from core.cases.replies import Reply
from core.cases.service import CaseService
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plan_templates import load_template
from core.domain.views import MovedCase

router = APIRouter(tags=["plans"])


@router.post("/plan/generate",
             responses=documented(CaseReply, 400, 401, 403, 404, 409, 413, 422))
def generate_plan(body: GeneratePlanBody, write: Writer, cases: Cases,
                  x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Attach the template's ChangePlan and move the case PLANNING → WAIT_GATE (a case still
    ANALYZING has its analysis concluded first); the reply carries the plan hash an approval
    must name. An unknown template is 404."""
    in_scope(cases, write.principal, body.case_id)
    plan = load_template(body.template)
    correlation = correlation_id(x_correlation_id)
    if cases.get_case(body.case_id)["status"] == CaseStatus.ANALYZING:
        concluded = conclude_analysis(body, write, cases, correlation)
        if not concluded.ok and not concluded.moved_on:  # the analyst concluded first
            return send_reply(concluded)
    cmd = TransitionCase(case_id=body.case_id, event=CaseEvent.PLAN_READY, actor=write.actor,
                         correlation_id=correlation, plan=plan,
                         attribution=write.attribution(body.actor))
    return send_reply(cases.transition(cmd, write.key))


def conclude_analysis(body: GeneratePlanBody, write: Write, cases: CaseService,
                      correlation: str | None) -> Reply[MovedCase]:
    """``analysis_done`` made by the caller proposing a plan, under a key of its own derived
    from the request's, so a repeat replays it."""
    cmd = TransitionCase(case_id=body.case_id, event=CaseEvent.ANALYSIS_DONE, actor=write.actor,
                         reason=f"concluded by POST /plan/generate: the caller proposes the "
                                f"{body.template} plan", correlation_id=correlation,
                         attribution=write.attribution(body.actor))
    return cases.transition(cmd, f"{write.key}:analysis_done")
