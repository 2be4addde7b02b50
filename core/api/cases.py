"""Case endpoints: open, read, list, timeline, and the one way to move a case, ``PATCH
/case/{id}/transition``. Each parses, hands a command to the case service and sends its reply."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from core.api.deps import Cases, WriteKey
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
from core.domain.fsm import CaseStatus

router = APIRouter(tags=["cases"])


@router.post("/case/create", status_code=201,
             responses=documented(CaseReply, 400, 401, 413, 422, ok=201))
def create_case(body: CreateCaseBody, key: WriteKey, cases: Cases,
                x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Open a case in NEW at version 0."""
    cmd = OpenCase(title=body.title, actor=body.actor, severity=body.severity,
                   tenant=body.tenant, correlation_id=correlation_id(x_correlation_id))
    return send_reply(cases.open_case(cmd, key), location=True)


@router.get("/case", responses=documented(CaseListReply, 422))
def list_cases(cases: Cases, status: CaseStatus | None = None,
               limit: Annotated[int, Query(ge=1, le=200)] = 50) -> Response:
    """The newest cases first, optionally only those in one status."""
    return send_data(cases.list_cases(status, limit))


@router.get("/case/{case_id}", responses=documented(CaseReply, 404, 422))
def get_case(case_id: UUID, cases: Cases) -> Response:
    """One case; its ETag is the version to send back in If-Match."""
    case: dict[str, Any] = cases.get_case(case_id)
    return send_data(case, headers={"ETag": etag(case["version"])})


@router.get("/case/{case_id}/timeline", responses=documented(TimelineReply, 404, 422))
def case_timeline(case_id: UUID, cases: Cases) -> Response:
    """Every accepted move and every guard refusal of the case, oldest first."""
    return send_data(cases.timeline(case_id))


@router.patch("/case/{case_id}/transition",
              responses=documented(CaseReply, 400, 401, 404, 409, 412, 413, 422))
def transition_case(case_id: UUID, body: TransitionBody, key: WriteKey, cases: Cases,
                    if_match: IfMatchHeader = None,
                    x_correlation_id: CorrelationIdHeader = None) -> Response:
    """Move the case by one FSM event (the only way a case changes)."""
    cmd = TransitionCase(
        case_id=case_id, event=body.event, actor=body.actor, reason=body.reason,
        correlation_id=correlation_id(x_correlation_id) or body.correlation_id,
        meta=dict(body.meta),
        expected_version=expected_version(if_match, body.expected_version),
        plan=body.plan, plan_hash=body.plan_hash,
        fence=None if body.fence is None else body.fence.to_fence(),
    )
    return send_reply(cases.transition(cmd, key))
