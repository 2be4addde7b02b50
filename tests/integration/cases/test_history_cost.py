"""A case's thousandth event costs what its first did (issue 43): with an alert group's notes on
the case, the commands of the case service (the gate's admission of a plan, a yes, a no, a
resume) and the reads made per event (the card's progress, ``/case timeline``'s tail, the
consumers' notes) read the same few timeline rows as on a quiet case, and still judge what they
judged from the whole timeline: the plan that failed is refused, the latest alerts are listed.
On PostgreSQL, whose cursor counts the rows a SELECT returns."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine, event

from core.cases.service import CaseService
from core.domain.commands import NoteCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.errors import GuardFailed
from tests.support.cases import PLAN, case_in, case_service, command, key

pytestmark = pytest.mark.postgres

NOTES = 120
OTHER = {**PLAN, "title": "Drain the queue, then restart"}


@contextmanager
def timeline_rows_read(engine: Engine) -> Iterator[list[int]]:
    """The number of ``case_timeline`` rows the SELECTs inside return, as a one-item list."""
    read = [0]

    def count(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM case_timeline" in statement:
            read[0] += max(cursor.rowcount, 0)

    event.listen(engine, "after_cursor_execute", count)
    try:
        yield read
    finally:
        event.remove(engine, "after_cursor_execute", count)


def alert_notes(service: CaseService, case_id: UUID, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        service.note(NoteCase(case_id, "alert_new", "alertmanager",
                              reason=f"new alert in this group: HighErrorRate on pod-{n}",
                              meta={"group": "g", "fingerprint": f"{n:016x}"}), key()).data()


@pytest.fixture
def pg_service(pg_engine: Engine) -> CaseService:
    return case_service(pg_engine)


def failed_plan_with_notes(service: CaseService, notes: int) -> UUID:
    """A case whose approved plan failed and was resumed, then ``notes`` alert notes."""
    case_id = case_in(service, CaseStatus.EXECUTING)
    service.transition(command(case_id, CaseEvent.EXEC_FAILED, reason="step 1 failed"),
                       key()).data()
    service.transition(command(case_id, CaseEvent.RESUME, reason="drain first"), key()).data()
    alert_notes(service, case_id, notes)
    return case_id


def gate_round(service: CaseService, case_id: UUID) -> None:
    """Another plan admitted, rejected and the case resumed without a retry, then
    the failed plan refused at the gate."""
    service.transition(command(case_id, CaseEvent.PLAN_READY, plan=OTHER), key()).data()
    service.transition(command(case_id, CaseEvent.GATE_REJECTED), key()).data()
    service.transition(command(case_id, CaseEvent.RESUME, reason="drain first"), key()).data()
    with pytest.raises(GuardFailed, match="already failed on this case"):
        service.transition(command(case_id, CaseEvent.PLAN_READY), key()).data()


def test_the_gate_reads_the_same_rows_beside_a_hundred_notes(pg_service: CaseService,
                                                             pg_engine: Engine) -> None:
    quiet = failed_plan_with_notes(pg_service, 0)
    busy = failed_plan_with_notes(pg_service, NOTES)
    with timeline_rows_read(pg_engine) as on_quiet:
        gate_round(pg_service, quiet)
    with timeline_rows_read(pg_engine) as on_busy:
        gate_round(pg_service, busy)
    assert on_busy[0] == on_quiet[0] < 40, (on_busy, on_quiet)


def test_the_progress_reads_a_bounded_slice_and_keeps_what_readers_show(
        pg_service: CaseService, pg_engine: Engine) -> None:
    case_id = failed_plan_with_notes(pg_service, 10)
    pg_service.note(NoteCase(case_id, "message_pinned", "U0BOB", reason="look at the pool",
                             meta={"author": "U0BOB"}), key()).data()
    with timeline_rows_read(pg_engine) as few:
        before = pg_service.progress(case_id)
    alert_notes(pg_service, case_id, NOTES, start=10)
    with timeline_rows_read(pg_engine) as many:
        progress = pg_service.progress(case_id)
    assert many[0] <= few[0] + 5, (many, few)
    assert progress.status == before.status == CaseStatus.PLANNING
    assert [pin.said for pin in progress.pins] == ["look at the pool"]
    alerts = [e.reason for e in progress.entries if e.event == "alert_new"]
    assert alerts[-3:] == [f"new alert in this group: HighErrorRate on pod-{n}"
                           for n in range(NOTES + 7, NOTES + 10)]
    assert [e.event for e in progress.entries if e.moved][:2] == ["case_opened",
                                                                  "start_analysis"]


def test_the_tail_and_the_notes_of_an_event_read_only_those(pg_service: CaseService,
                                                            pg_engine: Engine) -> None:
    case_id = failed_plan_with_notes(pg_service, NOTES)
    with timeline_rows_read(pg_engine) as read:
        tail, total = pg_service.timeline_tail(case_id, 15)
        opened = pg_service.timeline_of(case_id, "case_opened")
        moves = pg_service.moves(case_id)
    assert total == len(pg_service.timeline(case_id)) and len(tail) == 15
    assert tail[-1]["reason"] == f"new alert in this group: HighErrorRate on pod-{NOTES - 1}"
    assert [entry.actor for entry in opened] == ["sre@example"]
    assert [entry.event for entry in moves] == ["start_analysis", "analysis_done", "plan_ready",
                                                "gate_approved", "exec_failed", "resume"]
    assert read[0] == 15 + 1 + 1 + 6, read


def plan_cycles(service: CaseService, case_id: UUID, cycles: int) -> None:
    """``cycles`` times round the gate: a plan proposed again, rejected, the case resumed with
    a retry (a rejected plan comes back only when a person asks for it)."""
    for _ in range(cycles):
        service.transition(command(case_id, CaseEvent.PLAN_READY, plan=OTHER), key()).data()
        service.transition(command(case_id, CaseEvent.GATE_REJECTED), key()).data()
        service.transition(command(case_id, CaseEvent.RESUME, reason="retry"), key()).data()


def test_the_gate_reads_the_same_rows_after_many_rounds_of_the_same_plan(
        pg_service: CaseService, pg_engine: Engine) -> None:
    """A case that went round the gate forty times with the same plan (its moves, and the
    proposals of that plan, grow with each round) costs the gate what it did after one: the
    failed plan still refused, the other admitted, its rejection judged by who asked for it."""
    few = failed_plan_with_notes(pg_service, 0)
    many = failed_plan_with_notes(pg_service, 0)
    plan_cycles(pg_service, few, 1)
    plan_cycles(pg_service, many, 40)
    with timeline_rows_read(pg_engine) as after_one:
        gate_round(pg_service, few)
    with timeline_rows_read(pg_engine) as after_forty:
        gate_round(pg_service, many)
    assert after_forty[0] == after_one[0] < 20, (after_forty, after_one)
