"""The consumers up to the gate and the notifier, on both databases: each takes effect once for
a message delivered twice, and does nothing for a command that is stale."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine, select

from core.api.statuses import reply_status
from core.bootstrap import App
from core.chat import RecordingSink, plain
from core.consumers import build_consumers
from core.consumers.analyst import NO_ANALYST, Analyst
from core.consumers.gatekeeper import Gatekeeper
from core.consumers.intake import Intake
from core.consumers.notifier import Notifier, render
from core.consumers.planner import Planner
from core.db.case_store import as_utc
from core.db.tables import case_timeline, outbox, plan_proposed
from core.domain.commands import ApprovePlan, OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.domain.plan_templates import load_template
from core.domain.plans import plan_hash
from core.messaging.bus import InProcessBus
from core.messaging.consumer import Consumer, ConsumerRunner, Delivery
from core.messaging.envelope import Envelope
from core.messaging.relay import OutboxRelay
from tests.support import apps
from tests.support.cases import PLAN, REQUESTER, command, key

E, S = CaseEvent, CaseStatus
HIGH_RISK = {**PLAN, "title": "Fail over", "risk_score": 0.9,
             "steps": [{"action": "gateway.flip", "params": {"route": "r", "to": "b"},
                        "timeout_s": 30, "retry": 0}]}


# The template plans' windows after the change (60-300 s) pass in well under a second.
FAST = {"verify_time_scale": 0.001, "verify_poll_s": 0.02, "database_url": "sqlite://"}


def make_app(engine: Engine, **settings: Any) -> App:
    return apps.make_app(engine, **{**FAST, **settings})


@pytest.fixture
def app_options() -> dict[str, Any]:
    return FAST


def opened(app: App, title: str = "p95 latency spike on checkout") -> UUID:
    reply = app.cases.open_case(OpenCase(title=title, actor=REQUESTER), key())
    return UUID(reply.data()["case_id"])


def move(app: App, case_id: UUID, *events: CaseEvent, **extra: Any) -> None:
    for event in events:
        assert app.cases.transition(command(case_id, event, **extra), key()).ok


def messages(engine: Engine, topic: str, case_id: UUID) -> list[Envelope]:
    query = (select(outbox).where(outbox.c.topic == topic, outbox.c.key == str(case_id))
             .order_by(outbox.c.id))
    with engine.connect() as conn:
        return [Envelope(row["id"], row["topic"], row["key"], dict(row["payload"]))
                for row in conn.execute(query).mappings()]


def last(engine: Engine, topic: str, case_id: UUID) -> Envelope:
    return messages(engine, topic, case_id)[-1]


def deliver(consumer: Consumer, envelope: Envelope) -> None:
    consumer.handle(Delivery(consumer.name, envelope))


def timeline(engine: Engine, case_id: UUID) -> list[Any]:
    query = select(case_timeline).where(case_timeline.c.case_id == case_id)
    with engine.connect() as conn:
        return list(conn.execute(query.order_by(case_timeline.c.id)).mappings())


def events(engine: Engine, case_id: UUID) -> list[str]:
    return [row["event"] for row in timeline(engine, case_id)]


def status(app: App, case_id: UUID) -> tuple[str, int]:
    case = app.cases.get_case(case_id)
    return case["status"], case["version"]


# -- intake and the analyst placeholder ----------------------------------------------------------


def test_intake_starts_the_analysis_once(app, engine):
    case_id = opened(app)
    envelope = last(engine, Topic.CASE_OPENED, case_id)
    deliver(Intake(app), envelope)
    deliver(Intake(app), envelope)
    assert status(app, case_id) == ("ANALYZING", 1)
    assert events(engine, case_id) == ["case_opened", "start_analysis"]
    assert len(messages(engine, Topic.ANALYSIS_RUN, case_id)) == 1


def test_intake_ignores_a_case_that_moved_on(app, engine):
    case_id = opened(app)
    move(app, case_id, E.START_ANALYSIS, E.ANALYSIS_DONE)
    deliver(Intake(app), last(engine, Topic.CASE_OPENED, case_id))
    assert status(app, case_id) == ("PLANNING", 2)
    assert events(engine, case_id).count("start_analysis") == 1


def test_the_analyst_placeholder_says_no_analyst_is_configured_once(app, engine):
    case_id = opened(app)
    move(app, case_id, E.START_ANALYSIS)
    envelope = last(engine, Topic.ANALYSIS_RUN, case_id)
    deliver(Analyst(app), envelope)
    deliver(Analyst(app), envelope)
    assert status(app, case_id) == ("PLANNING", 2)
    done = [row for row in timeline(engine, case_id) if row["event"] == "analysis_done"]
    assert len(done) == 1 and done[0]["reason"] == NO_ANALYST
    assert len(messages(engine, Topic.PLAN_GENERATE, case_id)) == 1


def test_the_analyst_ignores_a_stale_command(app, engine):
    case_id = opened(app)
    move(app, case_id, E.START_ANALYSIS, E.ANALYSIS_DONE)
    deliver(Analyst(app), last(engine, Topic.ANALYSIS_RUN, case_id))
    assert status(app, case_id) == ("PLANNING", 2)


# -- the planner -------------------------------------------------------------------------------


@pytest.mark.parametrize(("title", "template"), [("checkout is slow", "noop"),
                                                 ("bad deploy of cart", "k8s.rollout.canary")])
def test_the_planner_proposes_the_template_for_the_case_opener_once(app, engine, title,
                                                                    template):
    case_id = opened(app, title)
    move(app, case_id, E.START_ANALYSIS, E.ANALYSIS_DONE)
    envelope = last(engine, Topic.PLAN_GENERATE, case_id)
    deliver(Planner(app), envelope)
    deliver(Planner(app), envelope)
    assert status(app, case_id) == ("WAIT_GATE", 3)
    with engine.connect() as conn:
        plans = list(conn.execute(select(plan_proposed)
                                  .where(plan_proposed.c.case_id == case_id)).mappings())
    assert len(plans) == 1
    assert plans[0]["plan_hash"] == plan_hash(load_template(template))
    assert plans[0]["proposed_by"] == REQUESTER, "the requester is the human who opened it"
    ready = [row for row in timeline(engine, case_id) if row["event"] == "plan_ready"]
    assert ready[0]["actor"] == "planner" and ready[0]["meta"]["context"] == {
        "template": template}


def test_the_planner_ignores_a_stale_command(app, engine):
    case_id = opened(app)
    move(app, case_id, E.START_ANALYSIS, E.ANALYSIS_DONE)
    stale = last(engine, Topic.PLAN_GENERATE, case_id)
    move(app, case_id, E.PLAN_READY)
    deliver(Planner(app), stale)
    assert status(app, case_id) == ("WAIT_GATE", 3)
    assert events(engine, case_id).count("plan_ready") == 1


# -- the gatekeeper ----------------------------------------------------------------------------


def at_gate(app: App, plan: dict[str, Any] = PLAN, title: str = "checkout is slow") -> UUID:
    case_id = opened(app, title)
    move(app, case_id, E.START_ANALYSIS, E.ANALYSIS_DONE)
    move(app, case_id, E.PLAN_READY, plan=plan)
    return case_id


def test_without_automatic_approval_the_gatekeeper_says_who_may_approve_once(engine):
    app = make_app(engine, approvers=["U1", "S-sre"])
    case_id = at_gate(app, HIGH_RISK)
    envelope = last(engine, Topic.GATE_EVAL, case_id)
    deliver(Gatekeeper(app), envelope)
    deliver(Gatekeeper(app), envelope)
    assert status(app, case_id) == ("WAIT_GATE", 3)
    notes = [row for row in timeline(engine, case_id) if row["event"] == "awaiting_approval"]
    assert len(notes) == 1
    reason = notes[0]["reason"]
    assert reason.startswith("waiting for approval by S-sre, U1: two distinct approvers")
    assert f"{REQUESTER} requested it and cannot approve" in reason
    [waiting] = messages(engine, Topic.AWAITING_APPROVAL, case_id)
    assert (waiting.payload["needs"], waiting.payload["plan_hash"]) == (2, plan_hash(HIGH_RISK))


def test_the_gatekeeper_approves_a_noop_plan_itself_when_the_policy_says_so(engine):
    app = make_app(engine, auto_approve="noop_only")
    case_id = at_gate(app)  # PLAN is noop-only
    envelope = last(engine, Topic.GATE_EVAL, case_id)
    deliver(Gatekeeper(app), envelope)
    deliver(Gatekeeper(app), envelope)
    assert status(app, case_id) == ("EXECUTING", 4)
    approved = [row for row in timeline(engine, case_id) if row["event"] == "gate_approved"]
    assert len(approved) == 1 and approved[0]["actor"] == "gatekeeper"
    assert len(messages(engine, Topic.EXEC_RUN, case_id)) == 1


def test_the_gatekeeper_waits_for_humans_on_a_plan_the_policy_does_not_cover(engine):
    app = make_app(engine, auto_approve="low_risk")
    case_id = at_gate(app, HIGH_RISK)
    deliver(Gatekeeper(app), last(engine, Topic.GATE_EVAL, case_id))
    assert status(app, case_id) == ("WAIT_GATE", 3)
    assert "awaiting_approval" in events(engine, case_id)


def test_the_gatekeeper_ignores_a_plan_already_decided(engine):
    app = make_app(engine, auto_approve="noop_only")
    case_id = at_gate(app)
    app.cases.approve_plan(ApprovePlan(case_id, plan_hash(PLAN), "bob"), key()).data()
    deliver(Gatekeeper(app), last(engine, Topic.GATE_EVAL, case_id))
    assert status(app, case_id) == ("EXECUTING", 4)
    assert [row["actor"] for row in timeline(engine, case_id)
            if row["event"] == "gate_approved"] == ["bob"]


# -- the approval's expiry ----------------------------------------------------------------------


def waiting_on_people(app: App, plan: dict[str, Any] = HIGH_RISK) -> tuple[UUID, datetime]:
    """A case whose plan the gatekeeper left for people; when it reached the gate."""
    case_id = at_gate(app, plan)
    deliver(Gatekeeper(app), last(app.engine, Topic.GATE_EVAL, case_id))
    at_gate_since = as_utc(datetime.fromisoformat(app.cases.get_case(case_id)["updated_at"]))
    return case_id, at_gate_since


def relayed(engine: Engine, now: datetime) -> list[Envelope]:
    """What a relay (a fresh one: a restarted process) publishes of cmd.gate.expire at ``now``."""
    seen: list[Envelope] = []
    bus = InProcessBus()
    bus.subscribe((Topic.GATE_EXPIRE,), seen.append)
    OutboxRelay(engine, bus, clock=lambda: now).drain()
    return seen


def test_a_plan_nobody_decides_expires_from_a_scheduled_row_that_survives_a_restart(engine):
    app = make_app(engine, approval_ttl_s=3600)
    case_id, since = waiting_on_people(app)
    [check] = messages(engine, Topic.GATE_EXPIRE, case_id)
    with engine.connect() as conn:
        due = conn.execute(select(outbox.c.deliver_after)
                           .where(outbox.c.id == check.message_id)).scalar_one()
    assert as_utc(due) == since + timedelta(hours=1)
    assert check.payload["plan_hash"] == plan_hash(HIGH_RISK)
    assert check.payload["version"] == 3 and check.payload["event"] == "awaiting_approval"
    [note] = [row for row in timeline(engine, case_id) if row["event"] == "awaiting_approval"]
    assert note["meta"]["context"]["expires_at"] == (since + timedelta(hours=1)).isoformat()

    assert relayed(engine, since + timedelta(minutes=59)) == []  # not before it is due
    app.close()
    restarted = make_app(engine, approval_ttl_s=3600)  # a new process: only the row remains
    restarted.cases.clock = lambda: since + timedelta(hours=1)
    [delivered] = relayed(engine, since + timedelta(hours=1))
    deliver(Gatekeeper(restarted), delivered)
    deliver(Gatekeeper(restarted), delivered)  # again: the case is no longer waiting
    assert status(restarted, case_id) == ("PARKED", 4)
    expired = [row for row in timeline(engine, case_id) if row["event"] == "gate_expired"]
    assert [(row["actor"], row["reason"]) for row in expired] == [
        ("gatekeeper", "approval expired after 1 h")]
    [fact] = messages(engine, Topic.PLAN_EXPIRED, case_id)
    assert plain(render(Topic.PLAN_EXPIRED, fact.payload) or ()) == (
        f"Plan {plan_hash(HIGH_RISK)[:12]}: approval expired after 1 h; the case is parked — "
        "ask for a fresh plan")
    late = restarted.cases.approve_plan(ApprovePlan(case_id, plan_hash(HIGH_RISK), "bob"), key())
    assert reply_status(late) == 409 and "approval expired after 1 h" in late.body


def test_a_decision_before_the_ttl_makes_the_expiry_check_a_no_op(engine):
    app = make_app(engine, approval_ttl_s=60)
    approved, since = waiting_on_people(app, PLAN)
    app.cases.approve_plan(ApprovePlan(approved, plan_hash(PLAN), "bob"), key()).data()
    reproposed, _ = waiting_on_people(app, PLAN)  # expires, resumes, waits on a new proposal
    app.cases.clock = lambda: since + timedelta(minutes=5)
    deliver(Gatekeeper(app), last(engine, Topic.GATE_EXPIRE, reproposed))
    move(app, reproposed, E.RESUME)
    move(app, reproposed, E.PLAN_READY, plan=PLAN)
    for check in relayed(engine, since + timedelta(minutes=5)):
        deliver(Gatekeeper(app), check)  # every check so far: each one is stale now
    assert status(app, approved) == ("EXECUTING", 4)
    assert status(app, reproposed) == ("WAIT_GATE", 6)
    assert events(engine, approved).count("gate_expired") == 0
    assert events(engine, reproposed).count("gate_expired") == 1


def test_a_check_that_comes_early_schedules_itself_again_once(engine):
    app = make_app(engine, approval_ttl_s=600)
    case_id, since = waiting_on_people(app)
    early = last(engine, Topic.GATE_EXPIRE, case_id)  # a test pump ignores deliver_after
    deliver(Gatekeeper(app), early)
    again = last(engine, Topic.GATE_EXPIRE, case_id)
    deliver(Gatekeeper(app), again)  # still early: the same note, nothing new
    assert status(app, case_id) == ("WAIT_GATE", 3)
    assert again.message_id != early.message_id
    assert len(messages(engine, Topic.GATE_EXPIRE, case_id)) == 2
    assert events(engine, case_id).count("approval_expiry_due") == 1
    assert again.payload["expires_at"] == (since + timedelta(minutes=10)).isoformat()


# -- the notifier ------------------------------------------------------------------------------


def test_the_notifier_posts_once_per_event_even_when_delivered_again(app, engine):
    sink = RecordingSink()
    case_id = at_gate(app, HIGH_RISK)
    app.cases.approve_plan(ApprovePlan(case_id, plan_hash(HIGH_RISK), "bob"), key()).data()
    every = [envelope for topic in Notifier.topics for envelope in messages(engine, topic, case_id)]
    every.sort(key=lambda envelope: envelope.message_id)
    for envelope in every:
        deliver(Notifier(app, sink), envelope)
    posted = sink.thread(str(case_id))
    for envelope in every:  # a redelivery, even to another notifier process
        deliver(Notifier(app, sink), envelope)
    assert sink.thread(str(case_id)) == posted
    assert posted == [
        f"Case opened by {REQUESTER}: checkout is slow (SEV3)",
        "NEW → ANALYZING: start_analysis by sre@example",
        "ANALYZING → PLANNING: analysis_done by sre@example",
        f"Plan {plan_hash(HIGH_RISK)[:12]} proposed by sre@example; waiting at the gate",
        f"bob approved plan {plan_hash(HIGH_RISK)[:12]}; 1 more approval(s) needed",
    ]
    assert {message.thread_key for message in sink.posts} == {str(case_id)}


def test_the_notifier_says_who_decided(app, engine):
    sink = RecordingSink()
    case_id = at_gate(app)
    app.cases.approve_plan(ApprovePlan(case_id, plan_hash(PLAN), "bob"), key()).data()
    deliver(Notifier(app, sink), last(engine, Topic.PLAN_APPROVED, case_id))
    other = at_gate(app)
    reject = TransitionCase(other, E.GATE_REJECTED, actor="carol", reason="too risky")
    assert app.cases.transition(reject, key()).ok
    deliver(Notifier(app, sink), last(engine, Topic.PLAN_REJECTED, other))
    digest = plan_hash(PLAN)[:12]
    assert sink.thread(str(case_id)) == [f"Plan {digest} approved by bob; executing"]
    assert sink.thread(str(other)) == [f"Plan {digest} rejected by carol: too risky"]


def test_the_notifier_stays_quiet_on_what_another_event_already_told(app, engine):
    sink = RecordingSink()
    case_id = at_gate(app)
    ready = [e for e in messages(engine, Topic.CASE_TRANSITION, case_id)
             if e.payload["event"] == "plan_ready"]
    deliver(Notifier(app, sink), ready[0])
    assert sink.posts == []
    assert render("evt.unknown.v1", {"case_id": str(case_id)}) is None


def test_the_notifier_posts_to_the_apps_chat_sink_by_default(app, engine):
    case_id = opened(app)
    runner = ConsumerRunner(engine, Notifier(app))
    envelope = last(engine, Topic.CASE_OPENED, case_id)
    assert [runner.deliver(envelope), runner.deliver(envelope)] == ["done", "duplicate"]
    assert isinstance(app.chat, RecordingSink)
    assert len(app.chat.thread(str(case_id))) == 1


# -- the loop through the gate -----------------------------------------------------------------


def pump(app: App, consumers: list[Consumer]) -> None:
    """Deliver every outbox row, in order, to the consumers of its topic, until none is left."""
    runners = [ConsumerRunner(app.engine, consumer, backoff_s=0) for consumer in consumers]
    after = 0
    while True:
        with app.engine.connect() as conn:
            fresh = list(conn.execute(select(outbox).where(outbox.c.id > after)
                                      .order_by(outbox.c.id)).mappings())
        if not fresh:
            return
        for row in fresh:
            envelope = Envelope(row["id"], row["topic"], row["key"], dict(row["payload"]))
            for runner in runners:
                if envelope.topic in runner.consumer.topics:
                    runner.deliver(envelope)
            after = row["id"]


def test_a_two_person_case_runs_to_closed_after_two_approvers_and_not_before(engine):
    app = make_app(engine, two_person_risk=0.0)
    consumers = build_consumers(app)
    case_id = opened(app)
    pump(app, consumers)
    assert status(app, case_id) == ("WAIT_GATE", 3)
    digest = app.cases.proposed_plan(case_id)["plan_hash"]
    own = app.cases.approve_plan(ApprovePlan(case_id, digest, REQUESTER), key())
    assert reply_status(own) == 422
    assert app.cases.approve_plan(ApprovePlan(case_id, digest, "bob"), key()).data()[
        "status"] == "WAIT_GATE"
    pump(app, consumers)
    assert status(app, case_id) == ("WAIT_GATE", 3)
    assert app.cases.approve_plan(ApprovePlan(case_id, digest, "carol"), key()).data()[
        "status"] == "EXECUTING"
    pump(app, consumers)
    assert status(app, case_id)[0] == "CLOSED"
    thread = app.chat.thread(str(case_id))
    assert thread[-1].startswith("VERIFYING → CLOSED: verify_pass by verifier — stand-in "
                                 "readings (OPSGATE_STATIC_METRICS): the check passed: ")
    assert any(text.startswith(f"Plan {digest[:12]}: waiting for approval by U0KIM, U0LEAD")
               for text in thread)
    assert f"Plan {digest[:12]} approved by bob, carol; executing" in thread
