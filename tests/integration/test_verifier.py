"""The verifier consumer on real SQLite and PostgreSQL: the plan's verify block against the
static metrics of settings, a local Prometheus-shaped server and an allow-listed probe."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.consumers.executor import Executor
from core.consumers.verifier import Verifier
from core.domain.messages import Topic
from core.messaging.consumer import ConsumerRunner, Delivery
from core.settings import Settings
from tests.integration.local_http import Reply, Seen, local_server
from tests.integration.plan_runs import (
    S,
    envelope_of,
    executing_case,
    fresh_copy,
    make_app,
    notes,
    plan_of,
    status,
)

NOOP = [{"action": "noop", "params": {}, "timeout_s": 10, "retry": 0}]


def verifying_case(app, verify: dict[str, Any]):
    """A case whose plan ran (one noop step): VERIFYING, its cmd.verify.run in the outbox."""
    case_id = executing_case(app, plan_of(NOOP, verify=verify))
    executor = ConsumerRunner(app.engine, Executor(app), sleep=lambda _s: None)
    assert executor.deliver(envelope_of(app.engine, case_id, Topic.EXEC_RUN)) == "done"
    assert status(app, case_id) == S.VERIFYING
    return case_id


def verify(app, case_id) -> str:
    runner = ConsumerRunner(app.engine, Verifier(app), sleep=lambda _s: None)
    return runner.deliver(envelope_of(app.engine, case_id, Topic.VERIFY_RUN))


def last(app, case_id, event: str) -> dict[str, Any]:
    return [row for row in app.cases.timeline(case_id) if row["event"] == event][-1]


def test_a_passing_check_closes_the_case(engine):
    app = make_app(engine, static_metrics={"error_rate": 0.002})
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    assert verify(app, case_id) == "done"

    assert status(app, case_id) == S.CLOSED
    [observation] = notes(app, case_id, "verify_result")
    assert observation["context"]["passed"] is True
    assert observation["context"]["observed"] == 0.002
    assert "error_rate = 0.002" in last(app, case_id, "verify_pass")["reason"]


def test_a_failing_check_parks_the_case_with_the_reading(engine):
    app = make_app(engine, static_metrics={"error_rate": 0.2})
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    assert verify(app, case_id) == "done"

    assert status(app, case_id) == S.PARKED
    reason = last(app, case_id, "verify_failed")["reason"]
    assert reason == "error_rate = 0.2, not below 0.01"
    assert notes(app, case_id, "verify_result")[0]["context"]["passed"] is False


def test_an_unevaluable_block_parks_the_case_and_says_why(engine):
    app = make_app(engine)
    case_id = verifying_case(app, {"metric": "error_rate", "bellow": 0.01})  # a typo
    assert verify(app, case_id) == "done"

    assert status(app, case_id) == S.PARKED
    assert last(app, case_id, "verify_failed")["reason"].startswith("cannot verify:")


def test_a_metric_missing_from_the_static_source_fails(engine):
    app = make_app(engine, static_metrics={})
    case_id = verifying_case(app, {"metric": "error_rate", "below": 0.01})
    verify(app, case_id)
    assert status(app, case_id) == S.PARKED
    assert "no value for 'error_rate'" in last(app, case_id, "verify_failed")["reason"]


def test_the_default_static_metrics_pass_the_template_metric_checks():
    values = Settings(prometheus_url=None).static_metrics
    assert values["http_5xx_ratio"] < 0.01 and values["latency_p95_ms"] < 500
    assert values["standby_saturation"] < 0.8 and values["error_rate"] < 0.01


def test_prometheus_is_read_when_configured_and_a_redelivery_reads_nothing_again(engine):
    def query(seen: Seen) -> Reply:
        body = {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {}, "value": [1700000000, "0.004"]}]}}
        return Reply(200, json.dumps(body).encode())

    with local_server({"/api/v1/query": query}) as prometheus:
        app = make_app(engine, prometheus_url=prometheus.base,
                       static_metrics={"http_5xx_ratio": 0.9})  # ignored: Prometheus is set
        case_id = verifying_case(app, {"metric": "http_5xx_ratio", "below": 0.01, "for_s": 60})
        envelope = envelope_of(engine, case_id, Topic.VERIFY_RUN)
        runner = ConsumerRunner(engine, Verifier(app), sleep=lambda _s: None)
        assert runner.deliver(envelope) == "done"
        assert runner.deliver(fresh_copy(envelope)) == "done"

    assert status(app, case_id) == S.CLOSED
    assert [s.query["query"] for s in prometheus.seen] == [
        ["max_over_time((http_5xx_ratio)[60s:])"]]
    assert len(notes(app, case_id, "verify_result")) == 1


def test_a_probe_against_an_allow_listed_url(engine):
    with local_server({"/healthz": Reply(200, b"ok"), "/broken": Reply(503)}) as server:
        app = make_app(engine, http_allowlist=[server.url("/")])
        healthy = verifying_case(app, {"probe": {"url": server.url("/healthz")}})
        broken = verifying_case(app, {"checks": [
            {"probe": {"url": server.url("/healthz")}},
            {"probe": {"url": server.url("/broken"), "expect_status": [200]}}]})
        verify(app, healthy)
        verify(app, broken)

    assert status(app, healthy) == S.CLOSED
    assert status(app, broken) == S.PARKED
    assert "check 2 of 2" in last(app, broken, "verify_failed")["reason"]
    assert "503" in last(app, broken, "verify_failed")["reason"]


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

    def _conclude(self, *args: Any, **kwargs: Any) -> None:
        raise Crash("killed before the verdict")


def test_a_redelivery_after_a_crash_reuses_the_first_reading(engine):
    readings = iter(["0.004", "0.9", "0.9"])  # the metric moves after the first reading

    def query(_seen: Seen) -> Reply:
        body = {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {}, "value": [1700000000, next(readings)]}]}}
        return Reply(200, json.dumps(body).encode())

    with local_server({"/api/v1/query": query}) as prometheus:
        app = make_app(engine, prometheus_url=prometheus.base)
        case_id = verifying_case(app, {"metric": "http_5xx_ratio", "below": 0.01})
        envelope = envelope_of(engine, case_id, Topic.VERIFY_RUN)
        with pytest.raises(Crash):
            CrashingVerifier(app).handle(Delivery("verifier", envelope))
        runner = ConsumerRunner(engine, Verifier(app), sleep=lambda _s: None)
        assert runner.deliver(fresh_copy(envelope)) == "done"

    assert len(prometheus.seen) == 1
    assert status(app, case_id) == S.CLOSED  # judged on the reading its note shows
    [observation] = notes(app, case_id, "verify_result")
    assert observation["context"]["observed"] == 0.004
