"""Concurrent writers on one case: the row lock and the idempotency key make exactly one win."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select

from core.api.statuses import reply_status
from core.cases.replies import Reply
from core.db.tables import case_timeline, outbox
from core.domain.fsm import CaseEvent, CaseStatus
from tests.support.cases import case_in, command, key

# Group "heavy": make test's two workers never run two of its files at once (Makefile).

WRITERS = 50


def _together(calls) -> list[Reply]:
    """Run the calls on WRITERS threads released at the same instant."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def _rows(engine, case_id, table):
    with engine.connect() as conn:
        query = select(func.count()).select_from(table)
        if table is case_timeline:
            query = query.where(case_timeline.c.case_id == case_id)
        return conn.execute(query).scalar_one()


def test_distinct_keys_same_expected_version_one_wins(service, engine):
    case_id = case_in(service, CaseStatus.NEW)
    timeline_before = _rows(engine, case_id, case_timeline)
    outbox_before = _rows(engine, case_id, outbox)
    cmd = command(case_id, CaseEvent.START_ANALYSIS, expected_version=0)
    replies = _together([lambda: service.transition(cmd, key()) for _ in range(WRITERS)])
    statuses = sorted(reply_status(r) for r in replies)
    assert statuses == [200] + [412] * (WRITERS - 1)
    case = service.get_case(case_id)
    assert (case["status"], case["version"]) == ("ANALYZING", 1)
    assert _rows(engine, case_id, case_timeline) == timeline_before + 1
    # one outbox batch: the transition fact and cmd.analysis.run
    assert _rows(engine, case_id, outbox) == outbox_before + 2


def test_same_key_fifty_times_one_transition_and_one_reply(service, engine):
    case_id = case_in(service, CaseStatus.NEW)
    timeline_before = _rows(engine, case_id, case_timeline)
    outbox_before = _rows(engine, case_id, outbox)
    cmd, k = command(case_id, CaseEvent.START_ANALYSIS), key()
    replies = _together([lambda: service.transition(cmd, k) for _ in range(WRITERS)])
    assert {(reply_status(r), r.body) for r in replies} == {
        (reply_status(replies[0]), replies[0].body)}
    assert reply_status(replies[0]) == 200
    assert sum(not r.replayed for r in replies) == 1
    assert service.get_case(case_id)["version"] == 1
    assert _rows(engine, case_id, case_timeline) == timeline_before + 1
    assert _rows(engine, case_id, outbox) == outbox_before + 2


def test_same_key_open_case_fifty_times_opens_one_case(service, engine):
    from core.db.tables import ops_case
    from core.domain.commands import OpenCase

    k = key()
    cmd = OpenCase(title="payments 5xx", actor="pager")
    replies = _together([lambda: service.open_case(cmd, k) for _ in range(WRITERS)])
    assert {(reply_status(r), r.body) for r in replies} == {(201, replies[0].body)}
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(ops_case)).scalar_one() == 1
