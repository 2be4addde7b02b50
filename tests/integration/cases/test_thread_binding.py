"""A case opened from a chat thread commits with its thread (``chat_thread``): no reader ever
sees the case without it, a retry or a simultaneous delivery opens one case with one thread, and
a thread that already names a case opens nothing. Migration 0011 keeps the bound threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from uuid import UUID

import pytest
from sqlalchemy import Engine, Uuid, bindparam, func, insert, select, text
from sqlalchemy.exc import IntegrityError

from core.cases.replies import Reply, ReplyOutcome
from core.cases.service import CaseService
from core.db.tables import chat_thread, ops_case
from core.domain.commands import ChatThread, OpenCase
from core.migrate import current_revision, head_revision, upgrade_engine
from tests.support.cases import key, open_case, snapshot
from tests.support.migrations import downgrade

CASES = 30
DELIVERIES = 8


def thread(n: int) -> ChatThread:
    return ChatThread("T1", "C1", f"{1700000000 + n}.000100")


def mention(n: int) -> OpenCase:
    return OpenCase(title=f"checkout is slow ({n})", actor="U1", thread=thread(n))


def threadless_cases(engine: Engine) -> tuple[int, int]:
    """(cases, cases without a thread), read in one statement: one snapshot on both databases."""
    bound = select(chat_thread.c.case_id).scalar_subquery()
    query = select(func.count(), func.count().filter(ops_case.c.id.not_in(bound)))
    with engine.connect() as conn:
        cases, threadless = conn.execute(query.select_from(ops_case)).one()
    return int(cases), int(threadless)


def thread_rows(engine: Engine) -> list[tuple[str, str, str, UUID]]:
    with engine.connect() as conn:
        rows = conn.execute(select(chat_thread.c.team, chat_thread.c.channel,
                                   chat_thread.c.thread_ts, chat_thread.c.case_id)).all()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def test_no_reader_ever_sees_a_case_opened_from_a_thread_without_its_thread(engine, service):
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(threadless_cases(engine))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        opened = [UUID(service.open_case(mention(n), key()).data()["case_id"])
                  for n in range(CASES)]
    finally:
        done.set()
        reader.join()
    seen.append(threadless_cases(engine))
    assert [threadless for _, threadless in seen] == [0] * len(seen)
    assert seen[-1] == (CASES, 0)
    assert sorted(thread_rows(engine), key=lambda row: row[2]) == [
        ("T1", "C1", thread(n).thread_ts, opened[n]) for n in range(CASES)]


def test_a_retried_open_replays_its_case_and_keeps_one_thread(engine, service):
    k = key()
    first = service.open_case(mention(1), k)
    again = service.open_case(mention(1), k)
    assert (first.outcome, first.replayed, again.replayed) == (ReplyOutcome.CREATED, False, True)
    assert again.body == first.body
    case_id = UUID(first.data()["case_id"])
    assert thread_rows(engine) == [("T1", "C1", thread(1).thread_ts, case_id)]


def test_simultaneous_deliveries_open_one_case_with_one_thread(engine, service):
    barrier, k = threading.Barrier(DELIVERIES), key()

    def deliver() -> Reply:
        barrier.wait()
        return service.open_case(mention(2), k)

    with ThreadPoolExecutor(max_workers=DELIVERIES) as pool:
        replies = list(pool.map(lambda _: deliver(), range(DELIVERIES)))
    assert {reply.body for reply in replies} == {replies[0].body}
    assert sorted(reply.replayed for reply in replies) == [False] + [True] * (DELIVERIES - 1)
    case_id = UUID(replies[0].data()["case_id"])
    assert threadless_cases(engine) == (1, 0)
    assert thread_rows(engine) == [("T1", "C1", thread(2).thread_ts, case_id)]


def test_a_thread_that_names_a_case_already_opens_no_second_case(engine, service):
    held = open_case(service)
    with engine.begin() as conn:
        conn.execute(insert(chat_thread).values(team="T1", channel="C1",
                                                thread_ts=thread(3).thread_ts, case_id=held))
    before = snapshot(engine)
    with pytest.raises(IntegrityError):
        service.open_case(mention(3), key())
    assert snapshot(engine) == before
    assert thread_rows(engine) == [("T1", "C1", thread(3).thread_ts, held)]


def test_migration_0011_keeps_bound_threads_and_drops_reservations(engine):
    case_id = open_case(CaseService(engine))
    downgrade(engine, "0010")
    legacy = text("INSERT INTO slack_thread (team, channel, thread_ts, case_id, created_at) "
                  "VALUES ('T1', 'C1', :ts, :case_id, CURRENT_TIMESTAMP)"
                  ).bindparams(bindparam("case_id", type_=Uuid()))
    with engine.begin() as conn:
        conn.execute(legacy, {"ts": "1.000100", "case_id": case_id})
        conn.execute(legacy, {"ts": "2.000100", "case_id": None})  # never bound
    upgrade_engine(engine)
    assert current_revision(engine) == head_revision()
    assert thread_rows(engine) == [("T1", "C1", "1.000100", case_id)]

    downgrade(engine, "0010")
    with engine.connect() as conn:
        back = conn.execute(text("SELECT thread_ts FROM slack_thread")).scalars().all()
    assert back == ["1.000100"]
