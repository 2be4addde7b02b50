"""The delivery watchdog on SQLite and PostgreSQL: a published row is delivered when every
consumer of its topic recorded it in its inbox; one a consumer has not recorded a bound after its
publication goes back to the relay (once, even with two watchdogs), then waits twice as long;
the in-process loop runs it too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, insert, select

from core.bootstrap import bootstrap
from core.db.tables import outbox
from core.loop import InProcessLoop
from core.messaging import inbox
from core.messaging.consumer import Delivery
from core.messaging.delivery import DeliveryWatchdog, look, send_again, subscribers
from tests.support.loop import loop_settings

TOPICS = subscribers({"executor": ("cmd.exec.run",), "notifier": ("cmd.exec.run", "evt.x"),
                      "intake": ("evt.opened",)})
NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def published(engine: Engine, topic: str, ago_s: float | None, attempts: int = 1,
              now: datetime = NOW, written_ago_s: float | None = None) -> int:
    """A row published ``ago_s`` before ``now`` (None: handed back to the relay), written
    ``written_ago_s`` before (default: when published)."""
    written = ago_s if written_ago_s is None else written_ago_s
    with engine.begin() as conn:
        return int(conn.execute(insert(outbox).values(
            topic=topic, key="case-1", payload={}, attempts=attempts,
            created_at=now - timedelta(seconds=written or 0),
            published_at=None if ago_s is None else now - timedelta(seconds=ago_s))
            .returning(outbox.c.id)).scalar_one())


def row(engine: Engine, message_id: int) -> tuple[bool, bool, int]:
    """(published, delivered, attempts)"""
    with engine.connect() as conn:
        found = conn.execute(select(outbox).where(outbox.c.id == message_id)).mappings().one()
    return (found["published_at"] is not None, found["delivered_at"] is not None,
            found["attempts"])


def watchdog(engine: Engine, now: datetime = NOW) -> DeliveryWatchdog:
    return DeliveryWatchdog(engine, TOPICS, bound_s=10, clock=lambda: now)


def test_a_row_every_consumer_recorded_is_delivered_and_a_late_one_is_sent_again(engine):
    recorded = published(engine, "cmd.exec.run", ago_s=60)
    half = published(engine, "cmd.exec.run", ago_s=60)
    young = published(engine, "cmd.exec.run", ago_s=2)
    nobody_listens = published(engine, "evt.unheard", ago_s=60)
    with engine.begin() as conn:
        for consumer in ("executor", "notifier"):
            inbox.mark(conn, consumer, recorded)
        inbox.mark(conn, "executor", half)
    again = watchdog(engine).sweep()
    assert [(m.message_id, m.missing) for m in again] == [(half, ("notifier",))]
    assert row(engine, recorded) == (True, True, 1)
    assert row(engine, half) == (False, False, 2)  # back to the relay
    assert row(engine, young) == (True, False, 1)  # within the bound: in flight
    assert row(engine, nobody_listens) == (True, True, 1)


def test_two_watchdogs_send_a_late_row_again_once(engine):
    late = published(engine, "evt.opened", ago_s=60)
    seen_by_both = look(engine, TOPICS, NOW, 10).late  # both looked before either wrote
    assert [m.message_id for m in send_again(engine, seen_by_both)] == [late]
    assert send_again(engine, seen_by_both) == []
    assert row(engine, late) == (False, False, 2)


def test_a_row_sent_again_waits_twice_as_long_before_the_next_time(engine):
    once = published(engine, "evt.opened", ago_s=15, attempts=3)  # sent again once already
    assert watchdog(engine).sweep() == []  # 15 s < 2 x 10 s
    assert [m.message_id for m in watchdog(engine, NOW + timedelta(seconds=6)).sweep()] == [once]


def test_a_message_sent_again_stays_undelivered_from_when_it_was_due_until_recorded(engine):
    """The watchdog's re-send does not reset how long a message has waited: sent again 2 s ago
    (or handed back and not yet published again), written a minute ago, it is late for
    ``/readyz`` and reconcile until every consumer's inbox holds it; the watchdog, counting
    from the last publication, does not send it again yet."""
    from core.consumers import subscriptions
    from core.ops.readiness import check_delivery
    from core.ops.reconcile import Reconciler

    topic = "evt.case.opened.v1"
    readers = sorted(subscribers(subscriptions())[topic])
    resent = published(engine, topic, ago_s=2, attempts=3, written_ago_s=60)
    handed_back = published(engine, topic, ago_s=None, attempts=2, written_ago_s=50)
    real = DeliveryWatchdog(engine, subscribers(subscriptions()), bound_s=10,
                            clock=lambda: NOW)
    late = look(engine, real.topics, NOW, 10).late
    assert [(m.message_id, m.waited_s(NOW)) for m in late] == [(resent, 60.0),
                                                                (handed_back, 50.0)]
    assert real.sweep() == []
    assert row(engine, handed_back) == (False, False, 2)
    check = check_delivery(engine, 10, NOW)
    assert (check["ok"], check["undelivered"], check["oldest_s"]) == (False, 2, 60.0)
    report = Reconciler(engine, outbox_bound_s=300, delivery_bound_s=10,
                        clock=lambda: NOW).run()
    assert [f.kind for f in report.findings] == ["undelivered", "undelivered"]
    assert report.findings[0].detail == (
        f"{topic} for case case-1 due 60 s ago, sent again 1 time, not recorded by "
        f"{', '.join(readers)} (bound 10 s)")
    with engine.begin() as conn:
        for consumer in readers:
            inbox.mark(conn, consumer, resent)
            inbox.mark(conn, consumer, handed_back)
    assert check_delivery(engine, 10, NOW)["ok"] is True
    real.sweep()
    assert row(engine, resent) == (True, True, 3)


class Recorder:
    """A consumer of ``evt.opened`` that remembers what it handled."""

    name = "intake"
    topics: tuple[str, ...] = ("evt.opened",)

    def __init__(self) -> None:
        self.handled: list[int] = []

    def handle(self, delivery: Delivery) -> None:
        self.handled.append(delivery.envelope.message_id)


def test_the_in_process_loop_sends_again_a_message_its_consumer_never_recorded(engine):
    """Same on the embedded bus: a row marked published that its consumer never recorded (its
    process died between the bus and the inbox, or a relay on a Redis that forgot) reaches the
    consumer within the bound, once; a recorded one is not handled again."""
    lost = published(engine, "evt.opened", ago_s=60, now=datetime.now(UTC))
    recorded = published(engine, "evt.opened", ago_s=60, now=datetime.now(UTC))
    with engine.begin() as conn:
        inbox.mark(conn, "intake", recorded)
    app = bootstrap(loop_settings(delivery_bound_s=0.5), engine=engine)
    consumer = Recorder()
    try:
        with InProcessLoop(app, [consumer]) as loop:
            assert loop.wait_for(lambda: row(engine, lost) == (True, True, 3), 15), \
                row(engine, lost)
            assert loop.wait_for(lambda: row(engine, recorded)[1], 5)
    finally:
        app.close()
    assert consumer.handled == [lost]
