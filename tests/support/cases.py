"""Helpers shared by the tests: a valid plan, shortest paths through the FSM, row snapshots."""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, func, select

from core.api.statuses import reply_status
from core.cases.service import CaseService
from core.db.tables import (
    case_timeline,
    chat_thread,
    idempotency,
    ops_case,
    outbox,
    plan_approved,
    plan_proposed,
    session_fence,
)
from core.domain.commands import OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plans import plan_hash
from core.domain.policy import ApprovalPolicy

E, S = CaseEvent, CaseStatus

PLAN: dict[str, Any] = {
    "title": "Restart the checkout pods",
    "risk_score": 0.2,
    "steps": [{"action": "noop", "params": {}, "timeout_s": 30, "retry": 0}],
    "rollback": {"action": "noop"},
    "verify": {"metric": "error_rate", "below": 0.01},
}
PLAN_HASH = plan_hash(PLAN)

PATH_TO: dict[CaseStatus, list[CaseEvent]] = {
    S.NEW: [],
    S.ANALYZING: [E.START_ANALYSIS],
    S.PLANNING: [E.START_ANALYSIS, E.ANALYSIS_DONE],
    S.WAIT_GATE: [E.START_ANALYSIS, E.ANALYSIS_DONE, E.PLAN_READY],
    S.EXECUTING: [E.START_ANALYSIS, E.ANALYSIS_DONE, E.PLAN_READY, E.GATE_APPROVED],
    S.VERIFYING: [E.START_ANALYSIS, E.ANALYSIS_DONE, E.PLAN_READY, E.GATE_APPROVED, E.EXEC_DONE],
    S.PARKED: [E.START_ANALYSIS, E.ANALYSIS_DONE, E.PLAN_READY, E.GATE_REJECTED],
    S.CLOSED: [E.START_ANALYSIS, E.ANALYSIS_DONE, E.PLAN_READY, E.GATE_APPROVED, E.EXEC_DONE,
               E.VERIFY_PASS],
}


def key() -> str:
    return uuid.uuid4().hex


REQUESTER = "sre@example"
"""Who opens the cases and asks for their plans; the approval policy never lets them approve."""
APPROVER = "lead@example"
"""Who decides at the gate: on the tests' approver list (``APPROVERS``)."""
APPROVERS = frozenset({APPROVER, "lead", "alice", "bob", "carol", "dave", "U0LEAD", "U0KIM"})
"""The approvers the tests name (an empty list lets nobody approve): every policy the tests build
from their defaults lists them (``TEST_POLICY``, ``test_settings``)."""


def command(case_id: UUID, event: CaseEvent, **overrides: Any) -> TransitionCase:
    """A transition command that satisfies the event's guard (a valid plan, the right hash, an
    approver who is not the requester)."""
    extra: dict[str, Any] = {"actor": REQUESTER}
    if event is E.PLAN_READY:
        extra["plan"] = PLAN
    if event is E.GATE_APPROVED:
        extra["plan_hash"] = PLAN_HASH
    if event in (E.GATE_APPROVED, E.GATE_REJECTED):
        extra["actor"] = APPROVER
    if event is E.GATE_EXPIRED:  # the guard also needs the approval TTL passed: a clock's matter
        extra.update(actor="gatekeeper", plan_hash=PLAN_HASH)
    return TransitionCase(case_id, event, **{**extra, **overrides})


def case_service(engine: Engine, **options: Any) -> CaseService:
    """A case service as bootstrap builds it with a metrics source configured (``PLAN`` has a
    metric check, which the ``plan_ready`` guard refuses without one) and, unless ``policy``
    says otherwise, the tests' ``APPROVERS`` named (an empty list lets nobody approve)."""
    options.setdefault("policy", ApprovalPolicy(approvers=APPROVERS))
    return CaseService(engine, reads_metrics=True, **options)


def open_case(service: CaseService, title: str = "p95 latency spike on checkout") -> UUID:
    reply = service.open_case(OpenCase(title=title, actor=REQUESTER), key())
    assert reply_status(reply) == 201, reply.body
    return UUID(reply.data()["case_id"])


def case_in(service: CaseService, status: CaseStatus) -> UUID:
    case_id = open_case(service)
    for event in PATH_TO[status]:
        reply = service.transition(command(case_id, event), key())
        assert reply_status(reply) == 200, reply.body
    assert service.get_case(case_id)["status"] == status
    return case_id


def snapshot(engine: Engine, case_id: UUID | None = None) -> dict[str, Any]:
    """Row counts of every core table and the case row: equal snapshots mean nothing changed."""
    with engine.connect() as conn:
        counts = {
            table.name: conn.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (ops_case, chat_thread, case_timeline, outbox, idempotency,
                          plan_proposed, plan_approved, session_fence)
        }
        if case_id is not None:
            row = conn.execute(select(ops_case).where(ops_case.c.id == case_id)).mappings().one()
            counts["case"] = (row["status"], row["version"], str(row["updated_at"]))
    return counts
