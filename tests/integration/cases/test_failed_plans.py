"""A plan that already failed on a case does not come back to the gate as it was: after PARKED →
resume, the ``plan_ready`` guard refuses the same plan hash (one refused row, nothing else) unless
the resume asked for a retry; a plan rejected at the gate likewise; another plan comes. On SQLite
and PostgreSQL."""

from __future__ import annotations

from uuid import UUID

import pytest

from core.cases.service import CaseService
from core.domain.fsm import CaseEvent, CaseStatus
from core.errors import GuardFailed
from tests.support.cases import PLAN, case_in, command, key, snapshot

OTHER = {**PLAN, "title": "Drain the queue, then restart"}


def failed_and_resumed(service: CaseService, reason: str, **meta: object) -> UUID:
    case_id = case_in(service, CaseStatus.EXECUTING)
    service.transition(command(case_id, CaseEvent.EXEC_FAILED,
                               reason="step 1 (noop) failed"), key()).data()
    service.transition(command(case_id, CaseEvent.RESUME, actor="U0CAROL", reason=reason,
                               meta=dict(meta)), key()).data()
    return case_id


def test_the_same_failed_plan_is_refused_and_another_comes(service: CaseService) -> None:
    case_id = failed_and_resumed(service, "drain the queue first")
    before = snapshot(service.uow.engine, case_id)
    with pytest.raises(GuardFailed) as refused:
        service.transition(command(case_id, CaseEvent.PLAN_READY), key()).data()
    assert refused.value.message.startswith("this exact plan (hash ") and \
        "already failed on this case (its steps failed: step 1 (noop) failed)" in \
        refused.value.message
    after = snapshot(service.uow.engine, case_id)
    assert after["case"] == before["case"] and after["plan_proposed"] == before["plan_proposed"]
    moved = service.transition(command(case_id, CaseEvent.PLAN_READY, plan=OTHER), key()).data()
    assert moved["status"] == CaseStatus.WAIT_GATE


@pytest.mark.parametrize(("reason", "meta"), [("retry: the node is back", {}),
                                              ("the node is back", {"retry": True})])
def test_a_retry_lets_the_same_plan_come_back(service: CaseService, reason: str,
                                              meta: dict[str, object]) -> None:
    case_id = failed_and_resumed(service, reason, **meta)
    moved = service.transition(command(case_id, CaseEvent.PLAN_READY), key()).data()
    assert moved["status"] == CaseStatus.WAIT_GATE


def test_a_rejected_plan_comes_back_only_when_a_retry_is_asked(service: CaseService) -> None:
    """Issue 41: a plan a person rejected is declined like one that failed."""
    case_id = case_in(service, CaseStatus.PARKED)  # the plan was rejected, not run
    assert [row["event"] for row in service.timeline(case_id)][-1] == "gate_rejected"
    service.transition(command(case_id, CaseEvent.RESUME), key()).data()
    with pytest.raises(GuardFailed) as refused:
        service.transition(command(case_id, CaseEvent.PLAN_READY), key()).data()
    assert "was rejected at the gate on this case" in refused.value.message
    moved = service.transition(command(case_id, CaseEvent.PLAN_READY, plan=OTHER), key()).data()
    assert moved["status"] == CaseStatus.WAIT_GATE
    retried = case_in(service, CaseStatus.PARKED)
    service.transition(command(retried, CaseEvent.RESUME, reason="retry it"), key()).data()
    again = service.transition(command(retried, CaseEvent.PLAN_READY), key()).data()
    assert again["status"] == CaseStatus.WAIT_GATE
