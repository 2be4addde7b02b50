"""Atomicity: a failure injected after any statement of a write leaves no partial rows, and the
same write then succeeds as if nothing had happened."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from uuid import uuid4

import pytest
from sqlalchemy import Engine, event

from core.api.statuses import reply_status
from core.cases.replies import Reply
from core.cases.service import CaseService, FirstNote
from core.domain.commands import ChatThread, NoteCase, OpenCase
from core.domain.fsm import CaseEvent, CaseStatus
from tests.support.cases import case_in, command, key, snapshot

E, S = CaseEvent, CaseStatus


class Injected(Exception):
    """The failure the test injects; nothing in opsgate catches it."""


@contextmanager
def statements_counted(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(_conn, _cursor, statement, *_args) -> None:
        seen.append(statement)

    event.listen(engine, "after_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "after_cursor_execute", count)


@contextmanager
def failing_after(engine: Engine, n: int) -> Iterator[None]:
    calls = 0

    def fail(_conn, _cursor, statement, *_args) -> None:
        nonlocal calls
        calls += 1
        if calls == n:
            raise Injected(f"after statement {n}: {statement[:60]}")

    event.listen(engine, "after_cursor_execute", fail)
    try:
        yield
    finally:
        event.remove(engine, "after_cursor_execute", fail)


SCENARIOS: dict[str, CaseStatus | None] = {
    "open_case": None,
    "open_case_in_thread": None,
    "open_case_with_first_note": None,
    "plan_ready": S.PLANNING,
    "gate_approved": S.WAIT_GATE,
    "guard_refusal": S.PLANNING,
}


def _write_for(name: str, service: CaseService, case_id) -> Callable[[str], Reply]:
    if name == "open_case":
        return lambda k: service.open_case(OpenCase("db down", "pager"), k)
    if name == "open_case_in_thread":
        thread = ChatThread("T1", "C1", f"{uuid4().int % 10**10}.000100")
        return lambda k: service.open_case(OpenCase("db down", "U1", thread=thread), k)
    if name == "open_case_with_first_note":
        def first(k: str) -> FirstNote:
            return FirstNote(f"{k}:note", lambda new: NoteCase(new, "alert_firing", "pager",
                                                               topic="evt.alert.noted.v1"))
        return lambda k: service.open_case(OpenCase("db down", "pager"), k, note=first(k))
    if name == "plan_ready":
        return lambda k: service.transition(command(case_id, E.PLAN_READY), k)
    if name == "gate_approved":
        return lambda k: service.transition(command(case_id, E.GATE_APPROVED), k)
    return lambda k: service.transition(command(case_id, E.PLAN_READY, plan={"title": "x"}), k)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_failure_after_any_statement_leaves_no_partial_rows(service, engine, name):
    start = SCENARIOS[name]
    probe_case = None if start is None else case_in(service, start)
    with statements_counted(engine) as seen:
        probe = _write_for(name, service, probe_case)(key())
    assert reply_status(probe) in (200, 201, 422)
    total = len(seen)
    # PostgreSQL: lock+recall, then one statement of data-modifying CTEs; SQLite: one per table.
    assert total >= 2, seen

    for n in range(1, total + 1):
        case_id = None if start is None else case_in(service, start)
        write = _write_for(name, service, case_id)
        k = key()
        before = snapshot(engine, case_id)
        with failing_after(engine, n), pytest.raises(Injected):
            write(k)
        assert snapshot(engine, case_id) == before, f"partial rows after statement {n}"
        retried = write(k)
        assert (reply_status(retried), retried.replayed) == (reply_status(probe), False), n
