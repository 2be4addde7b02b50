"""``POST /case/{id}/approve`` and ``/reject``: a person's decision on the plan a case waits on,
over REST. Only an approver principal linked to a person gets here (``admit_decision``); the
decision is the very one a Slack button makes (``CaseService.approve_plan``/``reject_plan``), under
the person's Slack id, so one person counts once whatever the channel."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Response

from core.api.deps import Cases, Decider, in_scope
from core.api.headers import CorrelationIdHeader, IfMatchHeader, correlation_id, expected_version
from core.api.openapi import documented
from core.api.replies import send_reply
from core.api.schemas import ApprovalReply, ApproveBody, CaseReply, RejectBody
from core.domain.commands import ApprovePlan, RejectPlan

router = APIRouter(tags=["approvals"])

DECISION_STATUSES = (400, 401, 403, 404, 409, 412, 413, 422)


@router.post("/case/{case_id}/approve", responses=documented(ApprovalReply, *DECISION_STATUSES))
def approve_plan(case_id: UUID, body: ApproveBody, write: Decider, cases: Cases,
                 if_match: IfMatchHeader = None,
                 x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Approve the plan the case waits on (by hash). The approval policy decides as for a Slack
    click: never the requester; two distinct people from the two-person risk up. When it is
    satisfied the case moves to EXECUTING; else the reply says how many more are needed."""
    in_scope(cases, write.principal, case_id)
    cmd = ApprovePlan(case_id, body.plan_hash, write.actor,
                      correlation_id=correlation_id(x_correlation_id),
                      expected_version=expected_version(if_match, body.expected_version),
                      attribution=write.attribution())
    return send_reply(cases.approve_plan(cmd, write.key))


@router.post("/case/{case_id}/reject", responses=documented(CaseReply, *DECISION_STATUSES))
def reject_plan(case_id: UUID, body: RejectBody, write: Decider, cases: Cases,
                if_match: IfMatchHeader = None,
                x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Reject the plan the case waits on (by hash), with a reason: the case parks."""
    in_scope(cases, write.principal, case_id)
    cmd = RejectPlan(case_id, body.plan_hash, write.actor, body.reason,
                     correlation_id=correlation_id(x_correlation_id),
                     expected_version=expected_version(if_match, body.expected_version),
                     attribution=write.attribution())
    return send_reply(cases.reject_plan(cmd, write.key))
