"""The verifier consumer on real SQLite and PostgreSQL: the plan's verify block judged on what
happened after the change, one scheduled reading at a time (a clock the test moves, a metric
source that answers by evaluation time, a local Prometheus-shaped server, allow-listed probes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from core.clock import utcnow
from core.consumers.verifier import Verifier
from core.db.case_store import as_utc
from core.db.tables import outbox, plan_proposed
from core.domain.messages import Topic
from core.evidence.sources import Worst
from core.evidence.stand_in import STAND_IN
from core.messaging.consumer import ConsumerRunner, Delivery
from core.messaging.envelope import Envelope
from core.settings import Settings
from tests.support.clock import Clock
from tests.support.local_http import Reply, local_server
from tests.support.plan_runs import (
    S,
    envelope_of,
    fresh_copy,
    make_app,
    notes,
    plan_of,
    status,
)
from tests.support.verification import NOOP, Loop, changed_at, next_reading_at, verifying_case


class Scripted:
    """A metric source answering by evaluation time: ``value(metric, at)`` per second, and over
    a window the worst of the seconds (at - over_s, at], as Prometheus' subquery would."""

    def __init__(self, value: Callable[[str, datetime], float]) -> None:
        self.value = value
        self.reads: list[tuple[str, float | None, datetime | None]] = []

    def read(self, query: str, *, over_s: float | None = None, worst: Worst = "max",
             at: datetime | None = None) -> float:
        assert at is not None, "the verifier always says when it reads"
        self.reads.append((query, over_s, at))
        seconds = range(int(over_s or 1))
        values = [self.value(query, at - timedelta(seconds=s)) for s in seconds]
        return max(values) if worst == "max" else min(values)


def verify(app, case_id, verifier: Verifier | None = None) -> str:
    runner = ConsumerRunner(app.engine, verifier or Verifier(app), sleep=lambda _s: None)
    return runner.deliver(envelope_of(app.engine, case_id, Topic.VERIFY_RUN))


def last(app, case_id, event: str) -> dict[str, Any]:
    return [row for row in app.cases.timeline(case_id) if row["event"] == event][-1]


def waiting_events(engine, case_id) -> list[dict[str, Any]]:
    query = select(outbox.c.payload).where(outbox.c.key == str(case_id),
                                           outbox.c.topic == Topic.VERIFY_WAITING)
    with engine.connect() as conn:
        return [dict(payload) for payload in conn.execute(query).scalars()]


def rows(engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return (len(conn.execute(select(outbox.c.id)).all()),
                len(conn.execute(select(plan_proposed.c.id)).all()))


# -- the window after the change -----------------------------------------------------------------

def test_a_window_is_judged_only_on_data_from_after_the_change(engine):
    app = make_app(engine, verify_poll_s=60)
    case_id = verifying_case(app, {"metric": "checkout_p95", "below": 1, "for_s": 300})
    since = changed_at(app, case_id)
    # 2.4 until the change finished, 0.5 after: a window reaching back before it would fail.
    source = Scripted(lambda _m, at: 2.4 if at <= since else 0.5)
    clock = Clock(since + timedelta(seconds=1))
    loop = Loop(app, Verifier(app, source, clock), clock)

    loop.relay.drain()
    assert status(app, case_id) == S.VERIFYING
    [first] = notes(app, case_id, "verify_reading")
    assert first["reason"] == ("checkout_p95 = 0.5 now, waiting (1s of the 300s window after "
                               "the change)")
    assert first["context"]["state"] == "pending" and first["context"]["observed"] == 0.5

    assert loop.until_settled(case_id) == 5  # readings at +61 s, +121 s, … +301 s
    assert status(app, case_id) == S.CLOSED
    assert last(app, case_id, "verify_pass")["reason"] == "checkout_p95 = 0.5 over 300s, below 1"
    assert source.reads[-1] == ("checkout_p95", 300, since + timedelta(seconds=301))
    assert all(over_s is None for _q, over_s, _at in source.reads[:-1])  # only "now" before
    assert len(notes(app, case_id, "verify_reading")) == 5
    [result] = notes(app, case_id, "verify_result")
    assert result["context"]["reading"] == 6 and result["context"]["passed"] is True


def test_it_waits_for_the_condition_to_start_holding_then_passes(engine):
    app = make_app(engine, verify_poll_s=60)
    case_id = verifying_case(app, {"metric": "checkout_p95", "below": 1, "for_s": 60})
    since = changed_at(app, case_id)
    recovered = since + timedelta(seconds=100)  # the fix takes a while to show
    source = Scripted(lambda _m, at: 2.4 if at <= recovered else 0.5)
    clock = Clock(since + timedelta(seconds=1))
    Loop(app, Verifier(app, source, clock), clock).until_settled(case_id)

    assert status(app, case_id) == S.CLOSED
    assert [n["reason"] for n in notes(app, case_id, "verify_reading")][1:] == [
        "checkout_p95 = 2.4 over 60s, not below 1", "checkout_p95 = 2.4 over 60s, not below 1"]
    assert last(app, case_id, "verify_pass")["reason"] == "checkout_p95 = 0.5 over 60s, below 1"


def test_a_condition_that_never_holds_parks_at_the_deadline_with_the_last_reading(engine):
    app = make_app(engine, verify_poll_s=60)
    case_id = verifying_case(app, {"metric": "checkout_p95", "below": 1, "for_s": 60,
                                   "timeout_s": 180})
    since = changed_at(app, case_id)
    source = Scripted(lambda _m, at: 2.4 if at <= since + timedelta(seconds=150) else 3.1)
    clock = Clock(since + timedelta(seconds=1))
    Loop(app, Verifier(app, source, clock), clock).until_settled(case_id)

    assert status(app, case_id) == S.PARKED
    deadline = since + timedelta(seconds=180)
    assert source.reads[-1][2] == deadline  # the last reading lands on the deadline
    assert last(app, case_id, "verify_failed")["reason"] == (
        f"checkout_p95 = 3.1 over 60s, not below 1; still so at the deadline "
        f"{deadline:%H:%M:%S} UTC, reading 4")


def test_the_thread_is_told_once_what_verification_waits_on(engine):
    app = make_app(engine, verify_poll_s=60)
    case_id = verifying_case(app, {"checks": [
        {"metric": "error_rate", "below": 0.01},
        {"metric": "checkout_p95", "below": 1, "for_s": 300}]})
    since = changed_at(app, case_id)
    clock = Clock(since + timedelta(seconds=5))
    source = Scripted(lambda m, _at: 0.001 if m == "error_rate" else 2.4)
    Loop(app, Verifier(app, source, clock), clock).until_settled(case_id)

    [told] = waiting_events(engine, case_id)
    assert told["reading"] == 1 and told["plan_hash"]
    assert told["waiting_for"] == "checkout_p95 below 1 for 300s after the change"
    assert told["observed"] == 2.4
    assert as_utc(datetime.fromisoformat(told["deadline"])) == since + timedelta(seconds=900)
    from core.chat import plain
    from core.consumers.notifier import render
    assert plain(render(Topic.VERIFY_WAITING, told) or ()) == (
        f"Verifying plan {told['plan_hash'][:12]}: waiting for checkout_p95 below 1 for 300s "
        f"after the change (now 2.4); deadline {since + timedelta(seconds=900):%H:%M:%S} UTC")
    assert status(app, case_id) == S.PARKED


# -- delivery: redelivery, restart, other cases --------------------------------------------------

def test_a_redelivered_reading_replays_it_and_writes_nothing(engine):
    app = make_app(engine, verify_poll_s=60)
    case_id = verifying_case(app, {"metric": "checkout_p95", "below": 1, "for_s": 300})
    since = changed_at(app, case_id)
    source = Scripted(lambda _m, _at: 0.5)
    clock = Clock(since + timedelta(seconds=1))
    verifier = Verifier(app, source, clock)
    runner = ConsumerRunner(engine, verifier, sleep=lambda _s: None)
    envelope = envelope_of(engine, case_id, Topic.VERIFY_RUN)
    assert runner.deliver(envelope) == "done"
    timeline, written, reads = len(app.cases.timeline(case_id)), rows(engine), len(source.reads)

    clock.now = since + timedelta(seconds=400)  # later: a new reading would now pass
    assert runner.deliver(envelope) == "duplicate"
    assert runner.deliver(fresh_copy(envelope)) == "done"
    assert (len(app.cases.timeline(case_id)), rows(engine), len(source.reads)) == (
        timeline, written, reads)
    assert status(app, case_id) == S.VERIFYING
    assert next_reading_at(engine, case_id) == since + timedelta(seconds=61)


def test_a_restart_between_readings_loses_nothing(engine):
    settings = {"verify_poll_s": 60}
    app = make_app(engine, **settings)
    case_id = verifying_case(app, {"metric": "checkout_p95", "below": 1, "for_s": 120})
    since = changed_at(app, case_id)
    source = Scripted(lambda _m, _at: 0.5)
    clock = Clock(since + timedelta(seconds=1))
    Loop(app, Verifier(app, source, clock), clock).relay.drain()
    assert next_reading_at(engine, case_id) == since + timedelta(seconds=61)
    app.close()  # the process dies; the next reading waits in the outbox

    restarted = make_app(engine, **settings)
    clock = Clock(since + timedelta(seconds=61))
    Loop(restarted, Verifier(restarted, source, clock), clock).until_settled(case_id)
    assert status(restarted, case_id) == S.CLOSED
    assert [n["context"]["reading"] for n in notes(restarted, case_id, "verify_reading")] == [
        1, 2]


def test_other_cases_go_on_while_one_waits(engine):
    app = make_app(engine, verify_poll_s=60)
    waiting = verifying_case(app, {"metric": "checkout_p95", "below": 1, "for_s": 300})
    quick = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    since = changed_at(app, quick)
    clock = Clock(since + timedelta(seconds=1))
    source = Scripted(lambda m, _at: 0.001 if m == "error_rate" else 0.5)
    Loop(app, Verifier(app, source, clock), clock).relay.drain()

    assert status(app, quick) == S.CLOSED
    assert status(app, waiting) == S.VERIFYING
    assert next_reading_at(engine, waiting) > clock.now


# -- blocks that cannot be judged ------------------------------------------------------------------

def test_an_old_plan_whose_block_cannot_be_judged_parks_at_once(engine):
    app = make_app(engine)
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    with engine.begin() as conn:  # stored before the plan_ready guard knew verify blocks
        conn.execute(update(plan_proposed).where(plan_proposed.c.case_id == case_id)
                     .values(plan=plan_of(NOOP, verify={"metric": "error_rate",
                                                        "bellow": 0.01})))
    assert verify(app, case_id) == "done"

    assert status(app, case_id) == S.PARKED
    reason = last(app, case_id, "verify_failed")["reason"]
    assert reason.startswith("cannot verify: bellow: unknown key")


def test_a_window_longer_than_the_longest_wait_parks_at_once(engine):
    app = make_app(engine, verify_max_wait_s=100)
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01, "for_s": 300})
    assert verify(app, case_id) == "done"
    assert status(app, case_id) == S.PARKED
    assert last(app, case_id, "verify_failed")["reason"] == (
        "cannot verify: the 300s window after the change outlasts the longest wait, 100s "
        "(OPSGATE_VERIFY_MAX_WAIT_S)")


# -- the static source, Prometheus, probes ---------------------------------------------------------

def test_a_passing_check_closes_the_case(engine):
    app = make_app(engine, static_metrics={"error_rate": 0.002})
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    assert verify(app, case_id) == "done"

    assert status(app, case_id) == S.CLOSED
    [observation] = notes(app, case_id, "verify_result")
    assert observation["context"]["passed"] is True
    assert observation["context"]["observed"] == 0.002
    assert "error_rate = 0.002" in last(app, case_id, "verify_pass")["reason"]


def deadline_passes(app, case_id, clock: Clock | None = None) -> Clock:
    """Readings until the case concludes, the clock jumping to each scheduled one."""
    clock = clock or Clock(changed_at(app, case_id) + timedelta(seconds=1))
    Loop(app, Verifier(app, clock=clock), clock).until_settled(case_id)
    return clock


def test_a_failing_check_parks_the_case_at_the_deadline_with_the_reading(engine):
    app = make_app(engine, static_metrics={"error_rate": 0.2}, verify_poll_s=300)
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    deadline_passes(app, case_id)

    assert status(app, case_id) == S.PARKED
    reason = last(app, case_id, "verify_failed")["reason"]
    assert reason.startswith(f"{STAND_IN}: error_rate = 0.2, not below 0.01; still so at the "
                             "deadline")
    assert notes(app, case_id, "verify_result")[0]["context"]["passed"] is False


def test_a_metric_missing_from_the_static_source_parks_at_the_deadline(engine):
    app = make_app(engine, static_metrics={"latency_p95_ms": 120.0}, verify_poll_s=300)
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01, "timeout_s": 60})
    deadline_passes(app, case_id)
    assert status(app, case_id) == S.PARKED
    assert "no value for 'error_rate'" in last(app, case_id, "verify_failed")["reason"]


def test_there_is_no_default_stand_in_table():
    settings = Settings(_env_file=None, prometheus_url=None)
    assert settings.static_metrics == {} and settings.static_metrics_before_change == {}


RATIO = 'http_5xx_ratio{job="service"}'
"""The 5xx ratio of the component the test's cases concern (OPSGATE_DEFAULT_METRIC_LABELS)."""
CHANGED_AGO_S = 600  # the change finished this long ago: its verification window is recorded


def good_ratio_history(since: float, until: float) -> str:
    """OpenMetrics for promtool: ``http_5xx_ratio`` at 0.4 %, a sample every 15 s."""
    moments = [since + 15 * k for k in range(int((until - since) // 15) + 1)]
    return "\n".join([*(f'http_5xx_ratio{{job="service"}} 0.004 {at:.3f}' for at in moments),
                      "# EOF", ""])


def test_prometheus_is_asked_for_the_window_ending_at_the_reading(engine, prometheus_server):
    now = time.time()
    prometheus = prometheus_server([], history=good_ratio_history(now - 2 * CHANGED_AGO_S,
                                                                  now - 60))
    app = make_app(engine, prometheus_url=prometheus.base_url, default_metric_labels="job=service",
                   static_metrics={"http_5xx_ratio": 0.9})  # ignored: Prometheus is set
    app.cases.clock = lambda: utcnow() - timedelta(seconds=CHANGED_AGO_S)
    case_id = verifying_case(app, {"metric": RATIO, "below": 0.01, "for_s": 60})
    at = changed_at(app, case_id) + timedelta(seconds=60)
    verifier = Verifier(app, clock=Clock(at))
    envelope = envelope_of(engine, case_id, Topic.VERIFY_RUN)
    runner = ConsumerRunner(engine, verifier, sleep=lambda _s: None)
    assert runner.deliver(envelope) == "done"
    assert runner.deliver(fresh_copy(envelope)) == "done"

    assert status(app, case_id) == S.CLOSED
    # The server's own query log: one reading, at ``at``, and whether the component had series.
    [asked, present] = prometheus.queries()
    assert asked["query"] == f"max_over_time(({RATIO})[60s:])"
    assert present["query"] == 'count({__name__="http_5xx_ratio", job="service"})'
    assert all(abs(instant(q["end"]) - at.timestamp()) < 0.001 for q in (asked, present))
    assert len(notes(app, case_id, "verify_result")) == 1


def instant(moment: str) -> float:
    return datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp()


def test_a_probe_against_an_allow_listed_url(engine):
    with local_server({"/healthz": Reply(200, b"ok"), "/broken": Reply(503)}) as server:
        app = make_app(engine, http_allowlist=[server.url("/")], verify_poll_s=600)
        healthy = verifying_case(app, {"probe": {"url": server.url("/healthz")}})
        broken = verifying_case(app, {"checks": [
            {"probe": {"url": server.url("/healthz")}},
            {"probe": {"url": server.url("/broken"), "expect_status": [200]}}]})
        verify(app, healthy)
        deadline_passes(app, broken)

    assert status(app, healthy) == S.CLOSED
    assert status(app, broken) == S.PARKED
    assert "check 2 of 2" in last(app, broken, "verify_failed")["reason"]
    assert "503" in last(app, broken, "verify_failed")["reason"]


def test_a_probe_off_the_allow_list_parks_at_once(engine):
    app = make_app(engine, http_allowlist=["http://127.0.0.1:1/"])
    case_id = verifying_case(app, {"probe": {"url": "http://127.0.0.1:9/healthz"}})
    verify(app, case_id)
    assert status(app, case_id) == S.PARKED
    assert "not on the http allow-list" in last(app, case_id, "verify_failed")["reason"]


def test_a_stale_verify_command_does_nothing(engine):
    app = make_app(engine, static_metrics={"error_rate": 0.0})
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    envelope = envelope_of(engine, case_id, Topic.VERIFY_RUN)
    runner = ConsumerRunner(engine, Verifier(app), sleep=lambda _s: None)
    assert runner.deliver(envelope) == "done"
    timeline = len(app.cases.timeline(case_id))
    assert runner.deliver(fresh_copy(envelope)) == "done"  # the case is CLOSED now
    assert len(app.cases.timeline(case_id)) == timeline
    assert status(app, case_id) == S.CLOSED


class Crash(Exception):
    pass


class CrashingVerifier(Verifier):
    """Dies after noting its observation, before the case moves."""

    def _move(self, *args: Any, **kwargs: Any) -> None:
        raise Crash("killed before the verdict")


def test_a_redelivery_after_a_crash_reuses_the_first_reading(engine, metric_service,
                                                              prometheus_server):
    """Real Prometheus: the metric moves after the first reading; the redelivery is judged on
    the reading its note shows, not on a new one."""
    metric_service.set("http_5xx_ratio", 0.004)
    prometheus = prometheus_server(metric_service)
    prometheus.wait_for("http_5xx_ratio", lambda values: values == [0.004])
    app = make_app(engine, prometheus_url=prometheus.base_url, default_metric_labels="job=service")
    case_id = verifying_case(app, {"metric": RATIO, "below": 0.01})
    envelope = envelope_of(engine, case_id, Topic.VERIFY_RUN)
    with pytest.raises(Crash):
        CrashingVerifier(app).handle(Delivery("verifier", envelope))
    assert len(notes(app, case_id, "verify_result")) == 1
    metric_service.set("http_5xx_ratio", 0.9)
    prometheus.wait_for("http_5xx_ratio", lambda values: values == [0.9])
    runner = ConsumerRunner(engine, Verifier(app), sleep=lambda _s: None)
    assert runner.deliver(fresh_copy(envelope)) == "done"

    assert status(app, case_id) == S.CLOSED  # judged on the reading its note shows
    [observation] = notes(app, case_id, "verify_result")
    assert observation["context"]["observed"] == 0.004


# -- stand-in readings: labelled, never a verified fix; the demo's react to the change -----------

def closed_case(app, source=None) -> Any:
    """A case of one noop step and an error-rate check, CLOSED by the verifier reading
    ``source`` (None: the settings' own)."""
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    assert verify(app, case_id, Verifier(app, source)) == "done"
    assert status(app, case_id) == S.CLOSED
    return case_id


def test_a_verdict_read_from_a_stand_in_table_is_labelled_in_the_timeline_thread_and_card(engine):
    from bot.card import card_message, outcome_post
    from bot.card_state import CaseState

    app = make_app(engine, static_metrics={"error_rate": 0.002})
    case_id = closed_case(app)

    [result] = notes(app, case_id, "verify_result")
    assert result["reason"] == f"{STAND_IN}: error_rate = 0.002, below 0.01"
    assert result["context"]["stand_in"] is True
    assert last(app, case_id, "verify_pass")["reason"].startswith(f"{STAND_IN}: ")
    closed = [e.payload for e in transitions(engine, case_id) if e.payload["to"] == "CLOSED"]
    assert f"is CLOSED: {STAND_IN}: error_rate = 0.002" in outcome_post(closed[0])
    _text, blocks = card_message(CaseState(app.cases.progress(case_id)))
    assert f"✅ Held: {STAND_IN}: error_rate = 0.002" in str(blocks)


def test_a_reading_from_a_real_source_carries_no_stand_in_label(engine):
    app = make_app(engine, static_metrics={"error_rate": 0.9})
    case_id = closed_case(app, Scripted(lambda _m, _at: 0.002))
    [result] = notes(app, case_id, "verify_result")
    assert result["reason"] == "error_rate = 0.002, below 0.01"
    assert "stand_in" not in result["context"]


def test_a_case_closed_on_stand_in_readings_is_never_offered_as_a_verified_fix(engine):
    from core.library import Library
    from core.library.render import evidence_text

    app = make_app(engine, static_metrics={"error_rate": 0.002})
    stand_in_case = closed_case(app)
    library = Library(app.engine)
    assert library.index_case(stand_in_case)

    [similar] = library.similar_cases("p95 latency spike on checkout")
    assert similar["case_id"] == str(stand_in_case) and similar["stand_in"] is True
    assert library.best_plan_for("p95 latency spike on checkout") is None
    assert f"not verified: {STAND_IN}" in evidence_text({"similar_cases": [similar]})

    # The same case closed on a real source's readings is a verified fix the library offers.
    verified_case = closed_case(app, Scripted(lambda _m, _at: 0.002))
    assert library.index_case(verified_case)
    best = library.best_plan_for("p95 latency spike on checkout")
    assert best is not None and best["case_id"] == str(verified_case)


def test_in_the_demo_a_latency_check_reads_bad_before_the_change_and_good_after(engine):
    from bot.card import card_message
    from bot.card_state import CaseState
    from core.cases.progress import progress_of
    from core.demo import demo_verification

    settings = demo_verification(Settings(_env_file=None, redis_url=None))
    app = make_app(engine, **settings.model_dump(include={
        "static_metrics", "static_metrics_before_change", "verify_time_scale",
        "verify_poll_s"}))
    case_id = verifying_case(app, {"metric": "latency_p95_ms", "below": 500, "for_s": 120})
    since = changed_at(app, case_id)
    clock = Clock(since + timedelta(seconds=0.1))
    Loop(app, Verifier(app, clock=clock), clock).until_settled(case_id)

    assert status(app, case_id) == S.CLOSED
    readings = notes(app, case_id, "verify_reading")
    assert readings[0]["context"]["observed"] == 2400.0  # the incident, as the change lands
    assert readings[0]["context"]["stand_in"] is True
    assert last(app, case_id, "verify_pass")["reason"] == (
        f"{STAND_IN}: latency_p95_ms = 120 over 1.2s, below 500")
    waiting = CaseState(progress_of(app.cases.get_case(case_id),
                                    app.cases.timeline(case_id)[:-2],
                                    app.cases.proposed_plan(case_id)))
    assert "(now 2400, a stand-in reading)" in str(card_message(waiting)[1])


def transitions(engine, case_id):
    query = (select(outbox).where(outbox.c.topic == Topic.CASE_TRANSITION,
                                  outbox.c.key == str(case_id)).order_by(outbox.c.id))
    with engine.connect() as conn:
        return [Envelope(int(r["id"]), r["topic"], r["key"], dict(r["payload"]))
                for r in conn.execute(query).mappings()]
