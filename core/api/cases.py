"""Case endpoints: open, read, list, timeline, and the one way to move a case, ``PATCH
/case/{id}/transition`` (but through the gate: ``core.api.approvals``). Each parses, hands a
command made as the caller's principal to the case service and sends its reply."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query, Response

from core.api.deps import Cases, Reader, Writer, in_scope
from core.api.headers import CorrelationIdHeader, IfMatchHeader, correlation_id, expected_version
from core.api.openapi import documented
from core.api.replies import etag, send_data, send_reply
from core.api.schemas import (
    CaseListReply,
    CaseReply,
    CreateCaseBody,
    TimelineReply,
    TransitionBody,
)
from core.domain.commands import OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.errors import Forbidden

router = APIRouter(tags=["cases"])

GATE_EVENTS = (CaseEvent.GATE_APPROVED, CaseEvent.GATE_REJECTED)


@router.post("/case/create", status_code=201,
             responses=documented(CaseReply, 400, 401, 403, 413, 422, ok=201))
def create_case(body: CreateCaseBody, write: Writer, cases: Cases,
                x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Open a case in NEW at version 0, as the token's principal."""
    cmd = OpenCase(title=body.title, actor=write.actor, severity=body.severity,
                   tenant=body.tenant, correlation_id=correlation_id(x_correlation_id),
                   attribution=write.attribution(body.actor),
                   components=tuple(dict.fromkeys(body.components)))
    return send_reply(cases.open_case(cmd, write.key), location=True)


@router.get("/case", responses=documented(CaseListReply, 401, 422))
def list_cases(cases: Cases, reader: Reader, status: CaseStatus | None = None,
               limit: Annotated[int, Query(ge=1, le=200)] = 50) -> Response:
    """The newest cases first, optionally only those in one status (a token scoped to
    channels: only those channels' cases)."""
    return send_data(cases.list_cases(status, limit, channels=reader.channels))


@router.get("/case/{case_id}", responses=documented(CaseReply, 401, 404, 422))
def get_case(case_id: UUID, cases: Cases, reader: Reader) -> Response:
    """One case; its ETag is the version to send back in If-Match."""
    case = cases.get_case(case_id, channels=reader.channels)
    return send_data(case, headers={"ETag": etag(case["version"])})


@router.get("/case/{case_id}/timeline", responses=documented(TimelineReply, 401, 404, 422))
def case_timeline(case_id: UUID, cases: Cases, reader: Reader) -> Response:
    """Every accepted move and every guard refusal of the case, oldest first."""
    return send_data(cases.timeline(case_id, channels=reader.channels))


@router.patch("/case/{case_id}/transition",
              responses=documented(CaseReply, 400, 401, 403, 404, 409, 412, 413, 422))
def transition_case(case_id: UUID, body: TransitionBody, write: Writer, cases: Cases,
                    if_match: IfMatchHeader = None,
                    x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Move the case by one FSM event (the only way a case changes). ``gate_approved`` and
    ``gate_rejected`` are 403 here: people decide at the gate through POST
    /case/{id}/approve and /reject."""
    if body.event in GATE_EVENTS:
        verb = "approve" if body.event is CaseEvent.GATE_APPROVED else "reject"
        raise Forbidden(f"{body.event} is a person's decision: POST /case/{case_id}/{verb} "
                        "with an approver's token", use=f"POST /case/{case_id}/{verb}")
    in_scope(cases, write.principal, case_id)
    cmd = TransitionCase(
        case_id=case_id, event=body.event, actor=write.actor, reason=body.reason,
        correlation_id=correlation_id(x_correlation_id) or body.correlation_id,
        meta=dict(body.meta),
        expected_version=expected_version(if_match, body.expected_version),
        plan=body.plan, plan_hash=body.plan_hash,
        fence=None if body.fence is None else body.fence.to_fence(),
        attribution=write.attribution(body.actor),
    )
    return send_reply(cases.transition(cmd, write.key))
