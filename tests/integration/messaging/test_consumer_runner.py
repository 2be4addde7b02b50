"""Consumers through the runner: inbox dedup in the effect's transaction, bounded retries, dead
letters that do not block other cases."""

from __future__ import annotations

from sqlalchemy import func, select

from core.api.statuses import reply_status
from core.db.tables import case_timeline
from core.domain.fsm import CaseEvent
from core.messaging import inbox
from core.messaging.consumer import ConsumerRunner, Delivery
from core.messaging.envelope import Envelope
from tests.support.cases import command, open_case


class StartAnalysis:
    """A consumer whose effect is a transition, keyed by the message."""

    name = "analyst"
    topics = ("evt.case.opened.v1",)

    def __init__(self, service) -> None:
        self.service = service
        self.calls = 0

    def handle(self, delivery: Delivery) -> None:
        self.calls += 1
        case_id = delivery.envelope.payload["case_id"]
        from uuid import UUID

        reply = self.service.transition(command(UUID(case_id), CaseEvent.START_ANALYSIS),
                                        delivery.idempotency_key,
                                        inbox_entry=delivery.inbox_entry)
        assert reply_status(reply) in (200, 409), reply.body


class Poison:
    name = "poisoned"
    topics = ("t",)

    def __init__(self) -> None:
        self.calls: list[int] = []

    def handle(self, delivery: Delivery) -> None:
        self.calls.append(delivery.envelope.message_id)
        if delivery.envelope.payload.get("poison"):
            raise ValueError("cannot parse this payload")


def _timeline_rows(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(case_timeline)).scalar_one()


def test_redelivery_takes_effect_once(service, engine):
    case_id = open_case(service)
    envelope = Envelope(41, "evt.case.opened.v1", str(case_id), {"case_id": str(case_id)})
    consumer = StartAnalysis(service)
    runner = ConsumerRunner(engine, consumer, sleep=lambda _s: None)
    assert runner.deliver(envelope) == "done"
    rows = _timeline_rows(engine)
    assert runner.deliver(envelope) == "duplicate"
    assert consumer.calls == 1
    assert _timeline_rows(engine) == rows
    assert service.get_case(case_id)["version"] == 1
    with engine.connect() as conn:
        assert inbox.seen(conn, "analyst", 41)


def test_effect_committed_but_inbox_lost_still_replays(service, engine):
    """The runner died after the effect: the redelivery hits the same idempotency key."""
    case_id = open_case(service)
    envelope = Envelope(7, "evt.case.opened.v1", str(case_id), {"case_id": str(case_id)})
    consumer = StartAnalysis(service)
    consumer.handle(Delivery("analyst", envelope))
    from core.db.tables import inbox as inbox_table

    with engine.begin() as conn:
        conn.execute(inbox_table.delete())
    rows = _timeline_rows(engine)
    assert ConsumerRunner(engine, consumer, sleep=lambda _s: None).deliver(envelope) == "done"
    assert _timeline_rows(engine) == rows
    assert service.get_case(case_id)["version"] == 1


def test_poison_message_is_buried_after_bounded_retries_and_others_go_on(engine):
    consumer = Poison()
    slept: list[float] = []
    runner = ConsumerRunner(engine, consumer, max_attempts=3, backoff_s=0.1, sleep=slept.append)
    assert runner.deliver(Envelope(1, "t", "case-a", {"poison": True})) == "dead"
    assert runner.deliver(Envelope(2, "t", "case-b", {})) == "done"
    assert consumer.calls == [1, 1, 1, 2]
    assert slept == [0.1, 0.2]
    dead = inbox.dead_letters(engine)
    assert [(d["consumer"], d["message_id"], d["attempts"]) for d in dead] == [("poisoned", 1, 3)]
    assert "cannot parse" in dead[0]["error"]
    assert runner.deliver(Envelope(1, "t", "case-a", {"poison": True})) == "duplicate"


def test_requeued_dead_letter_is_delivered_again(engine):
    from datetime import UTC, datetime

    consumer = Poison()
    runner = ConsumerRunner(engine, consumer, max_attempts=1, sleep=lambda _s: None)
    runner.deliver(Envelope(5, "t", "case-a", {"poison": True}))
    (dead,) = inbox.dead_letters(engine)
    with engine.begin() as conn:
        envelope = inbox.requeue(conn, dead["id"], datetime.now(UTC))
    assert envelope is not None
    assert inbox.dead_letters(engine) == []
    assert runner.deliver(Envelope(5, "t", "case-a", {})) == "done"


def test_stream_consumer_acks_after_handling_and_reclaims_a_dead_consumers_entries(
        engine, redis_client, redis_prefix):
    from core.messaging.bus import RedisStreamsBus
    from core.messaging.streams import StreamConsumer

    bus = RedisStreamsBus(redis_client, prefix=f"{redis_prefix}stream:")
    consumer = Poison()
    dead = StreamConsumer(bus, ConsumerRunner(engine, consumer, sleep=lambda _s: None),
                          name="dies", block_ms=10, claim_idle_ms=1)
    dead.ensure_groups()
    bus.publish([Envelope(n, "t", f"case-{n}", {}) for n in (1, 2, 3)])
    # "dies" reads the entries and crashes before handling them: they stay pending.
    redis_client.xreadgroup("poisoned", "dies", {bus.stream("t"): ">"}, count=10)
    assert redis_client.xpending(bus.stream("t"), "poisoned")["pending"] == 3

    survivor = StreamConsumer(bus, ConsumerRunner(engine, consumer, sleep=lambda _s: None),
                              name="survivor", block_ms=10, claim_idle_ms=1)
    import time

    time.sleep(0.01)
    assert survivor.reclaim() == 3
    assert consumer.calls == [1, 2, 3]
    assert redis_client.xpending(bus.stream("t"), "poisoned")["pending"] == 0
    bus.publish([Envelope(2, "t", "case-2", {}), Envelope(4, "t", "case-4", {})])
    assert survivor.poll() == 2
    assert consumer.calls == [1, 2, 3, 4], "the republished message 2 is a duplicate"
