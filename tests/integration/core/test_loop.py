"""The in-process loop with stand-in consumers (one FSM move each): a case runs its whole life
with nobody calling the service by hand, stale commands do nothing, a poison message becomes a
dead letter without stopping the other cases, and the loop stops cleanly. Both databases."""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import func, select

from core.db.tables import inbox as inbox_table
from core.db.tables import outbox
from core.domain.commands import ApprovePlan, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.loop import InProcessLoop
from core.loop_processes import requeue_dead_letter
from core.messaging import inbox
from core.messaging.consumer import Delivery
from tests.support.cases import PLAN, PLAN_HASH, open_case

E, S = CaseEvent, CaseStatus


class Stage:
    """Moves a case by one event when a message of ``topic`` finds it in ``expects``."""

    def __init__(self, app, name: str, topic: str, expects: CaseStatus, event: CaseEvent,
                 **extra: Any) -> None:
        self.app, self.name, self.topics = app, name, (topic,)
        self.expects, self.event, self.extra = expects, event, extra
        self.handled: list[int] = []

    def handle(self, delivery: Delivery) -> None:
        payload = delivery.envelope.payload
        case_id = UUID(payload["case_id"])
        case = self.app.cases.get_case(case_id)
        if case["status"] != self.expects or case["version"] != payload["version"]:
            return  # stale: the case moved on since the message was written
        if payload.get("title") == "poison" and self.name == "intake":
            raise ValueError("this case's payload cannot be parsed")
        self.handled.append(delivery.envelope.message_id)
        self.take_effect(case_id, payload["version"], delivery).data()

    def take_effect(self, case_id: UUID, version: int, delivery: Delivery):
        return self.app.cases.transition(
            TransitionCase(case_id, self.event, actor=self.name, expected_version=version,
                           **self.extra),
            delivery.idempotency_key, inbox_entry=delivery.inbox_entry)


class Approver(Stage):
    """The gate: a person (not the requester) says yes to the plan by its hash."""

    def take_effect(self, case_id: UUID, version: int, delivery: Delivery):
        return self.app.cases.approve_plan(
            ApprovePlan(case_id, PLAN_HASH, "alice", expected_version=version),
            delivery.idempotency_key, inbox_entry=delivery.inbox_entry)


def stages(app) -> list[Stage]:
    return [
        Stage(app, "intake", Topic.CASE_OPENED, S.NEW, E.START_ANALYSIS),
        Stage(app, "analyst", Topic.ANALYSIS_RUN, S.ANALYZING, E.ANALYSIS_DONE),
        Stage(app, "planner", Topic.PLAN_GENERATE, S.PLANNING, E.PLAN_READY, plan=PLAN),
        Approver(app, "gatekeeper", Topic.GATE_EVAL, S.WAIT_GATE, E.GATE_APPROVED),
        Stage(app, "executor", Topic.EXEC_RUN, S.EXECUTING, E.EXEC_DONE),
        Stage(app, "verifier", Topic.VERIFY_RUN, S.VERIFYING, E.VERIFY_PASS),
    ]


@pytest.fixture
def app_options(engine):
    return {"database_url": str(engine.url), "consumer_max_attempts": 2, "relay_poll_s": 0.5,
            "loop_poll_s": 0.02}


def _status(app, case_id: UUID) -> str:
    return str(app.cases.get_case(case_id)["status"])


def _count(engine, table, *where) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()


def test_cases_run_their_whole_life_without_a_hand(app):
    with InProcessLoop(app, stages(app)) as loop:
        cases = [open_case(app.cases, f"case {n}") for n in range(5)]
        assert loop.wait_for(lambda: all(_status(app, c) == S.CLOSED for c in cases), 30)
        assert loop.wait_for(lambda: loop.unpublished() == 0, 10)
    for case_id in cases:
        events = [row["event"] for row in app.cases.timeline(case_id)]
        assert events == ["case_opened", "start_analysis", "analysis_done", "plan_ready",
                          "gate_approved", "exec_done", "verify_pass"]
    assert not loop.running


def test_stale_commands_do_nothing_and_redelivery_is_absorbed(app):
    loop = InProcessLoop(app, stages(app))
    case_id = open_case(app.cases)
    # Moved by hand to PLANNING before any consumer saw it: intake's and analyst's messages
    # are stale now, the planner's is current.
    for event in (E.START_ANALYSIS, E.ANALYSIS_DONE):
        app.cases.transition(TransitionCase(case_id, event, actor="sre"), f"{event}-{case_id}")
    with loop:
        assert loop.wait_for(lambda: _status(app, case_id) == S.CLOSED, 30)
    by_name = {stage.name: stage for stage in loop.consumers}
    assert by_name["intake"].handled == [] and by_name["analyst"].handled == []
    # The relay crashed before marking its last batch: every message goes out again.
    with app.engine.begin() as conn:
        conn.execute(outbox.update().values(published_at=None))
    rows = len(app.cases.timeline(case_id))
    assert loop.relay.drain() > 0
    assert len(app.cases.timeline(case_id)) == rows
    assert sum(len(stage.handled) for stage in loop.consumers) == 4


def test_a_poison_message_is_buried_and_other_cases_go_on(app):
    with InProcessLoop(app, stages(app)) as loop:
        poison = open_case(app.cases, "poison")
        healthy = open_case(app.cases, "healthy")
        assert loop.wait_for(lambda: _status(app, healthy) == S.CLOSED, 30)
        assert loop.wait_for(lambda: len(inbox.dead_letters(app.engine)) == 1, 10)
    assert _status(app, poison) == S.NEW
    [dead] = inbox.dead_letters(app.engine)
    assert (dead["consumer"], dead["topic"], dead["key"]) == ("intake", Topic.CASE_OPENED,
                                                             str(poison))
    assert dead["attempts"] == 2 and "cannot be parsed" in dead["error"]
    assert _count(app.engine, inbox_table, inbox_table.c.consumer == "intake") == 2


def test_stop_waits_for_the_message_in_hand(app):
    entered, release = threading.Event(), threading.Event()

    class Slow:
        name, topics = "slow", (Topic.CASE_OPENED,)

        def handle(self, delivery: Delivery) -> None:
            entered.set()
            release.wait(10)

    loop = InProcessLoop(app, [Slow()]).start()
    open_case(app.cases)
    assert entered.wait(10)
    stopper = threading.Thread(target=loop.stop)
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive(), "stop must not cut a consumer off mid-effect"
    release.set()
    stopper.join(10)
    assert not loop.running
    assert _count(app.engine, inbox_table, inbox_table.c.consumer == "slow") == 1


def test_a_requeued_dead_letter_reaches_its_consumer_again(app):
    with InProcessLoop(app, stages(app)) as loop:
        intake = loop.consumers[0]
        poison = open_case(app.cases, "poison")
        assert loop.wait_for(lambda: len(inbox.dead_letters(app.engine)) == 1, 10)
        [dead] = inbox.dead_letters(app.engine)

        # Still broken: requeued, it dies again and is listed again, with its latest error.
        assert requeue_dead_letter(app, dead["id"]).message_id == dead["message_id"]
        assert loop.wait_for(lambda: len(inbox.dead_letters(app.engine)) == 1, 10)
        [again] = inbox.dead_letters(app.engine)
        assert (again["id"], again["requeued_at"]) == (dead["id"], None)

        # Fixed: requeued, it takes effect and the case runs its life; the other consumers of
        # the topic skip the message by their inbox.
        intake.handle = _fixed(intake)
        requeue_dead_letter(app, dead["id"])
        assert loop.wait_for(lambda: _status(app, poison) == S.CLOSED, 30)
        assert inbox.dead_letters(app.engine) == []


def _fixed(stage: Stage):
    def handle(delivery: Delivery) -> None:
        payload = delivery.envelope.payload
        stage.app.cases.transition(
            TransitionCase(UUID(payload["case_id"]), E.START_ANALYSIS, actor="intake"),
            delivery.idempotency_key, inbox_entry=delivery.inbox_entry).data()
    return handle


def test_the_relay_process_outlives_a_bus_outage(app):
    """A Redis error is no database error: the relay's own retry does not know it; the relay
    process must still go on once the bus is back, and stop cleanly."""
    import io

    import redis

    from core.loop_processes import run_relay

    class Flaky:
        def __init__(self) -> None:
            self.failures, self.published = 3, []

        def publish(self, envelopes):
            if self.failures:
                self.failures -= 1
                raise redis.ConnectionError("Redis is down")
            self.published.extend(envelopes)

    bus, stop, out = Flaky(), threading.Event(), io.StringIO()
    open_case(app.cases)
    relay = threading.Thread(target=run_relay, args=(app, bus, stop, out),
                             kwargs={"progress_every_s": 0.05})
    relay.start()
    try:
        deadline = time.monotonic() + 20
        while "relay: 1 messages published" not in out.getvalue() and \
                time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        relay.join(10)
    assert not relay.is_alive()
    assert bus.failures == 0 and [e.topic for e in bus.published] == [Topic.CASE_OPENED]
    assert "relay: 1 messages published" in out.getvalue()
