"""``/metrics`` after a scripted scenario: exact counts of transitions, conflicts by status,
idempotent replays, outbox publishes, inbox dedups, and the latency histograms of gateway calls,
adapter steps and verification (compared as deltas: collectors are process-wide)."""

from __future__ import annotations

import socket
import uuid
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert

from core.db.tables import outbox
from core.domain.commands import ApprovePlan
from core.loop import InProcessLoop
from core.messaging.consumer import ConsumerRunner
from core.messaging.envelope import Envelope
from tests.support.loop import FAST_VERIFY
from tests.support.processes import Process, clean_env
from tests.support.servers import REDIS_URL

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient) -> Samples:
    reply = client.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def total(samples: Samples, name: str) -> float:
    return sum(value for (sample, _), value in samples.items() if sample == name)


@pytest.fixture
def app_options() -> dict[str, Any]:
    return FAST_VERIFY


def _write(client: TestClient, method: str, path: str, key: str, **kwargs: Any) -> Any:
    return client.request(method, path, headers={"Idempotency-Key": key,
                                                 **kwargs.pop("headers", {})}, **kwargs)


def test_the_rest_scenario_counts_transitions_conflicts_and_replays_exactly(client):
    before = scrape(client)
    opened = _write(client, "POST", "/case/create", "m-open", json={"title": "p95 up"})
    assert opened.status_code == 201
    case = opened.json()["data"]["case_id"]
    again = _write(client, "POST", "/case/create", "m-open", json={"title": "p95 up"})
    assert again.headers["Idempotent-Replayed"] == "true"
    path = f"/case/{case}/transition"
    body = {"event": "start_analysis", "actor": "sre"}
    assert _write(client, "PATCH", path, "m-1", json=body).status_code == 200
    assert _write(client, "PATCH", path, "m-1", json=body).status_code == 200  # a replay
    assert _write(client, "PATCH", path, "m-2", json={"event": "verify_pass",
                                                       "actor": "sre"}).status_code == 409
    assert _write(client, "PATCH", path, "m-3", json={"event": "analysis_done", "actor": "sre"},
                  headers={"If-Match": '"0"'}).status_code == 412
    assert _write(client, "PATCH", path, "m-4", json={"event": "analysis_done",
                                                       "actor": "sre"}).status_code == 200
    assert _write(client, "PATCH", path, "m-5", json={"event": "plan_ready",
                                                       "actor": "sre"}).status_code == 422
    assert _write(client, "PATCH", path, "m-1", json={"event": "plan_ready",
                                                       "actor": "sre"}).status_code == 422
    after = scrape(client)

    moves = {("NONE", "NEW", "case_opened"): 1, ("NEW", "ANALYZING", "start_analysis"): 1,
             ("ANALYZING", "PLANNING", "analysis_done"): 1}
    for (source, target, event), count in moves.items():
        assert delta(before, after, "case_transition_total",
                     **{"from": source, "to": target, "event": event}) == count
    assert total(after, "case_transition_total") - total(before, "case_transition_total") == 3
    assert delta(before, after, "conflict_total", reason="409") == 1
    assert delta(before, after, "conflict_total", reason="412") == 1
    assert delta(before, after, "conflict_total", reason="422") == 2  # guard + key reuse
    assert delta(before, after, "idempotent_replay_total") == 2


def test_the_closed_loop_counts_publishes_steps_verification_and_dedups(app, client):
    before = scrape(client)
    with InProcessLoop(app) as loop:
        opened = _write(client, "POST", "/case/create", "m-loop", json={"title": "5xx up"})
        case = opened.json()["data"]["case_id"]

        def status() -> str:
            return str(client.get(f"/case/{case}").json()["data"]["status"])

        assert loop.wait_for(lambda: status() == "WAIT_GATE", 30)
        plan = app.cases.proposed_plan(uuid.UUID(case))
        assert plan is not None
        steps = len(plan["plan"]["steps"])
        app.cases.approve_plan(ApprovePlan(uuid.UUID(case), plan["plan_hash"], "lead"),
                               "m-approve").data()
        assert loop.wait_for(lambda: status() in ("CLOSED", "PARKED"), 30)
        assert loop.wait_for(lambda: loop.unpublished() == 0, 10)
        runner = ConsumerRunner(app.engine, next(c for c in loop.consumers
                                                 if c.name == "intake"))
        first = Envelope(1, "evt.case.opened.v1", case, {"case_id": case, "version": 0})
        assert runner.deliver(first) == "duplicate"  # the loop's intake already took it
    after = scrape(client)

    assert status() == "CLOSED"
    published = delta(before, after, "outbox_publish_total", topic="cmd.exec.run",
                      status="published")
    assert published == 1
    assert delta(before, after, "outbox_publish_total", topic="evt.case.opened.v1",
                 status="published") == 1
    assert delta(before, after, "inbox_dedup_total", consumer="intake") == 1
    assert delta(before, after, "adapter_step_latency_seconds_count", action=str(
        plan["plan"]["steps"][0]["action"])) == steps
    readings = sum(row["event"] in ("verify_reading", "verify_result")
                   for row in app.cases.timeline(uuid.UUID(case)))
    assert delta(before, after, "verify_latency_seconds_count") == readings  # one per reading
    assert delta(before, after, "outbox_publish_total", topic="cmd.verify.run",
                 status="published") == readings
    assert delta(before, after, "gateway_call_seconds_count") >= steps + 1
    assert delta(before, after, "case_transition_total", **{
        "from": "WAIT_GATE", "to": "EXECUTING", "event": "gate_approved"}) == 1
    assert ("slack_ack_seconds_count", ()) in after


def test_a_relay_process_serves_its_own_metrics(tmp_path, pg_engine, redis_client,
                                                redis_prefix):
    """The relay's counters live in the relay process: OPSGATE_METRICS_PORT exposes them."""
    with pg_engine.begin() as conn:
        conn.execute(insert(outbox), [{"topic": "t.metrics", "key": "k", "payload": {"n": n}}
                                      for n in range(3)])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = clean_env(OPSGATE_DATABASE_URL=pg_engine.url.render_as_string(hide_password=False),
                    OPSGATE_REDIS_URL=REDIS_URL, OPSGATE_STREAM_PREFIX=redis_prefix,
                    OPSGATE_METRICS_PORT=str(port))
    relay = Process("relay", ("relay", "--progress-s", "0.2"), env, tmp_path / "relay.log")
    try:
        relay.start()
        relay.wait_for_output(f"relay: metrics on port {port}")
        relay.wait_for_output("relay: 3 messages published")
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'outbox_publish_total{status="published",topic="t.metrics"} 3.0' in text
        assert relay.terminate() == 0
    finally:
        relay.close()
