"""The outbox relay on real databases: order, rollback, concurrent relays, NOTIFY and its loss."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, insert, select, text

from core.db.tables import outbox
from core.domain.fsm import CaseEvent
from core.messaging.bus import InProcessBus, RedisStreamsBus
from core.messaging.envelope import Envelope
from core.messaging.outbox import unpublished
from core.messaging.relay import OutboxRelay
from core.ops.readiness import check_relay_lag
from core.ops.reconcile import Reconciler
from tests.support.cases import command, key, open_case
from tests.support.clock import Clock


class Collector:
    def __init__(self) -> None:
        self.seen: list[Envelope] = []
        self.lock = threading.Lock()
        self.arrived = threading.Event()

    def __call__(self, envelope: Envelope) -> None:
        with self.lock:
            self.seen.append(envelope)
        self.arrived.set()


def _bus(topics=("evt.case.opened.v1", "evt.case.transition.v1", "cmd.analysis.run", "t")):
    bus, collector = InProcessBus(), Collector()
    bus.subscribe(topics, collector)
    return bus, collector


def _unpublished(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(outbox)
                            .where(outbox.c.published_at.is_(None))).scalar_one()


def test_relay_publishes_committed_rows_in_order_and_marks_them(service, engine):
    case_id = open_case(service)
    service.transition(command(case_id, CaseEvent.START_ANALYSIS), key())
    bus, collector = _bus()
    relay = OutboxRelay(engine, bus, batch_size=2)
    assert relay.drain() == 3
    assert [e.topic for e in collector.seen] == [
        "evt.case.opened.v1", "evt.case.transition.v1", "cmd.analysis.run"]
    ids = [e.message_id for e in collector.seen]
    assert ids == sorted(ids)
    assert {e.key for e in collector.seen} == {str(case_id)}
    assert _unpublished(engine) == 0
    assert relay.drain() == 0


def test_a_rolled_back_transaction_never_produces_a_delivery(engine):
    with engine.connect() as conn:
        conn.execute(insert(outbox).values(topic="t", key="k", payload={}))
        conn.rollback()
    bus, collector = _bus()
    assert OutboxRelay(engine, bus).drain() == 0
    assert collector.seen == []


def test_failed_publish_leaves_rows_for_the_next_attempt(engine):
    with engine.begin() as conn:
        conn.execute(insert(outbox), [{"topic": "t", "key": "k", "payload": {"n": n}}
                                      for n in range(3)])

    class Broken:
        def publish(self, envelopes):
            raise ConnectionError("bus down")

    with pytest.raises(ConnectionError):
        OutboxRelay(engine, Broken()).relay_batch()
    assert _unpublished(engine) == 3
    bus, collector = _bus()
    assert OutboxRelay(engine, bus).drain() == 3
    assert [e.payload["n"] for e in collector.seen] == [0, 1, 2]


def test_a_failed_publish_behind_a_full_batch_rolls_back_it_and_the_batch_claimed_behind(
        pg_engine):
    """PostgreSQL claims the next batch while the current one is published: when the second
    batch's publish fails, the first stays published, the second and the one claimed behind it
    go back, and the next relay publishes them in order."""
    with pg_engine.begin() as conn:
        conn.execute(insert(outbox), [{"topic": "t", "key": "k", "payload": {"n": n}}
                                      for n in range(5)])
    published: list[int] = []

    class FailsSecond:
        def publish(self, envelopes):
            if len(published) == 2:
                raise ConnectionError("bus down")
            published.extend(e.payload["n"] for e in envelopes)

    with pytest.raises(ConnectionError):
        OutboxRelay(pg_engine, FailsSecond(), batch_size=2).drain()
    assert published == [0, 1]
    assert _unpublished(pg_engine) == 3
    bus, collector = _bus()
    assert OutboxRelay(pg_engine, bus, batch_size=2).drain() == 3
    assert [e.payload["n"] for e in collector.seen] == [2, 3, 4]
    assert _unpublished(pg_engine) == 0


def test_concurrent_relays_never_claim_the_same_row(pg_engine):
    with pg_engine.begin() as conn:
        conn.execute(insert(outbox), [{"topic": "t", "key": str(n % 7), "payload": {"n": n}}
                                      for n in range(2000)])
    collectors = []
    threads = []
    for _ in range(4):
        bus, collector = _bus()
        collectors.append(collector)
        relay = OutboxRelay(pg_engine, bus, batch_size=50)
        threads.append(threading.Thread(target=relay.drain))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    ids = [e.message_id for c in collectors for e in c.seen]
    assert len(ids) == 2000
    assert len(set(ids)) == 2000
    assert sum(1 for c in collectors if c.seen) >= 2, "the relays should share the work"
    assert _unpublished(pg_engine) == 0


def _running(relay):
    """``relay`` running on a thread, once it waits for work (on PostgreSQL: LISTENing)."""
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    thread.start()
    if not relay.idle.wait(10):
        stop.set()
        pytest.fail("the relay never went idle")
    return stop, thread


def test_notify_wakes_the_relay_long_before_the_poll_period(pg_engine):
    bus, collector = _bus()
    stop, thread = _running(OutboxRelay(pg_engine, bus, poll_s=30))
    try:
        with pg_engine.begin() as conn:
            conn.execute(insert(outbox).values(topic="t", key="k", payload={}))
        assert collector.arrived.wait(10), "NOTIFY did not wake the relay"
    finally:
        stop.set()
        thread.join(timeout=35)


def test_a_lost_notify_costs_at_most_the_poll_period(pg_engine):
    with pg_engine.begin() as conn:
        conn.execute(text("ALTER TABLE outbox DISABLE TRIGGER outbox_notify"))
    bus, collector = _bus()
    stop, thread = _running(OutboxRelay(pg_engine, bus, poll_s=0.5))
    try:
        with pg_engine.begin() as conn:
            conn.execute(insert(outbox).values(topic="t", key="k", payload={}))
        assert collector.arrived.wait(5), "polling did not pick up the row"
        assert len(collector.seen) == 1
    finally:
        stop.set()
        thread.join(timeout=5)


def test_redis_streams_bus_publishes_one_entry_per_message(redis_client, redis_prefix):
    bus = RedisStreamsBus(redis_client, prefix=f"{redis_prefix}stream:")
    bus.ensure_group("t", "planner")
    envelopes = [Envelope(n, "t", "case-1", {"n": n}) for n in (1, 2, 3)]
    bus.publish(envelopes)
    entries = redis_client.xreadgroup("planner", "c1", {bus.stream("t"): ">"}, count=10)
    (_, messages), = entries
    got = [Envelope.from_fields({k.decode(): v.decode() for k, v in fields.items()})
           for _, fields in messages]
    assert got == envelopes


def test_a_dead_letter_requeued_while_its_row_is_being_published_is_not_lost(sqlite_engine):
    """The consumer dies on the message and an operator requeues it before the relay has marked
    the row published (on SQLite the relay publishes between its read and its mark): the row
    must stay unpublished for the next batch, not be marked over the requeue. (On PostgreSQL
    the relay holds the row locked until its mark commits, so a requeue waits for it.)"""
    engine = sqlite_engine
    from types import SimpleNamespace

    from core.loop_processes import requeue_dead_letter
    from core.messaging import inbox

    with engine.begin() as conn:
        conn.execute(insert(outbox).values(topic="t", key="k", payload={"n": 1}))
    requeued: list[int] = []

    def consumer_dies_and_is_requeued(envelope: Envelope) -> None:
        with engine.begin() as conn:
            inbox.bury(conn, "intake", envelope, "poison", 2)
        [dead] = inbox.dead_letters(engine)
        requeue_dead_letter(SimpleNamespace(engine=engine), dead["id"])
        requeued.append(envelope.message_id)

    bus = InProcessBus()
    bus.subscribe(("t",), consumer_dies_and_is_requeued)
    relay = OutboxRelay(engine, bus)
    assert relay.relay_batch() == 1
    assert requeued == [1] and _unpublished(engine) == 1  # the requeue stands
    bus2, collector = _bus()
    assert OutboxRelay(engine, bus2).relay_batch() == 1
    assert [e.message_id for e in collector.seen] == [1] and _unpublished(engine) == 0


def test_a_scheduled_row_waits_until_due_while_due_rows_flow(engine):
    """A row with ``deliver_after`` in the future is not handed out; the rows around it are,
    in id order; once the relay's clock reaches it, it goes too."""
    start = datetime.now(UTC)
    with engine.begin() as conn:  # (an executemany takes its columns from the first row)
        conn.execute(insert(outbox), [
            {"topic": "t", "key": "a", "payload": {"n": 0}, "deliver_after": None},
            {"topic": "t", "key": "a", "payload": {"n": 1},
             "deliver_after": start + timedelta(seconds=30)},
            {"topic": "t", "key": "a", "payload": {"n": 2}, "deliver_after": None},
            {"topic": "t", "key": "b", "payload": {"n": 3},
             "deliver_after": start - timedelta(seconds=1)},  # already due
        ])
    clock = Clock(start)
    bus, collector = _bus()
    relay = OutboxRelay(engine, bus, batch_size=1, clock=clock)
    assert relay.drain() == 3
    assert [e.payload["n"] for e in collector.seen] == [0, 2, 3]
    assert _unpublished(engine) == 1
    assert unpublished(engine, start) == 0  # nothing due is waiting on the relay

    clock.now = start + timedelta(seconds=29)
    assert relay.drain() == 0
    clock.now = start + timedelta(seconds=30)
    assert unpublished(engine, clock.now) == 1
    assert relay.drain() == 1
    assert [e.payload["n"] for e in collector.seen] == [0, 2, 3, 1]
    assert _unpublished(engine) == 0


def test_a_scheduled_row_is_not_late_before_it_is_due(engine):
    """Readiness and reconciliation measure a scheduled row's lag from its delivery time."""
    start = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(outbox).values(topic="t", key="k", payload={},
                                           deliver_after=start + timedelta(seconds=600)))
    lag = check_relay_lag(engine, 60.0, start + timedelta(seconds=300))
    assert lag["ok"] and lag["unpublished"] == 0
    late = check_relay_lag(engine, 60.0, start + timedelta(seconds=700))
    assert not late["ok"] and late["unpublished"] == 1 and 99 <= late["lag_s"] <= 101

    def stale(at: datetime) -> list[str]:
        reconciler = Reconciler(engine, outbox_bound_s=60.0, clock=lambda: at)
        return [f.subject for f in reconciler.stale_outbox(at, repair=False)]

    assert stale(start + timedelta(seconds=300)) == []
    assert len(stale(start + timedelta(seconds=700))) == 1


def test_an_idle_relay_wakes_when_a_scheduled_row_falls_due(pg_engine):
    """The row's NOTIFY came when it was written; the relay must not then sleep a whole poll
    period past its delivery time. (SQLite has no NOTIFY: its loop polls every loop_poll_s.)"""
    engine = pg_engine
    bus, collector = _bus()
    stop, thread = _running(OutboxRelay(engine, bus, poll_s=30))
    try:
        due_at = datetime.now(UTC) + timedelta(seconds=1)
        with engine.begin() as conn:
            conn.execute(insert(outbox).values(topic="t", key="k", payload={},
                                               deliver_after=due_at))
        assert collector.arrived.wait(10), "the relay slept past the row's delivery time"
        assert datetime.now(UTC) >= due_at
    finally:
        stop.set()
        thread.join(timeout=35)
