"""The verifier's evidence over real HTTP on 127.0.0.1: the PromQL a window sends, an unreachable
Prometheus, and allow-listed probes. What Prometheus answers (values, several series, scalars,
no data, refusals, windows over time) is tested against the real server in
``test_peers_prometheus.py``."""

from __future__ import annotations

import json

import pytest

from core.executor.allowlists import UrlAllowList
from core.executor.evidence import PrometheusSource, StaticSource, evaluate
from tests.integration.local_http import Reply, Seen, local_server

SERIES = {
    "http_5xx_ratio": [("checkout-a", "0.004"), ("checkout-b", "0.02")],
    "up": [("checkout-a", "1")],
}


def prometheus_api(seen: Seen) -> Reply:
    """Answers like Prometheus' /api/v1/query; ``max_over_time((q)[Ns:])`` unwraps to ``q``."""
    query = seen.query["query"][0]
    base = query.split("((", 1)[1].split(")[", 1)[0] if "_over_time((" in query else query
    if base not in SERIES:
        return Reply(400, json.dumps({"status": "error", "errorType": "bad_data",
                                      "error": f"unknown query {base!r}"}).encode())
    data = {"resultType": "vector",
            "result": [{"metric": {"pod": pod}, "value": [1700000000.0, value]}
                       for pod, value in SERIES[base]]}
    return Reply(200, json.dumps({"status": "success", "data": data}).encode(),
                 {"Content-Type": "application/json"})


@pytest.fixture
def prometheus():
    with local_server({"/api/v1/query": prometheus_api, "/healthz": Reply(200, b"ok"),
                       "/broken": Reply(503, b"no")}) as srv:
        yield srv


def judge(verify, prometheus, allow=()):
    return evaluate(verify, PrometheusSource(prometheus.base, timeout_s=1.0),
                    UrlAllowList(allow), timeout_s=1.0)


def test_a_window_asks_prometheus_for_the_worst_value_over_it(prometheus):
    outcome = judge({"metric": "up", "above": 0.5, "below": 2, "for_s": 300}, prometheus)
    assert outcome.passed
    assert [s.query["query"][0] for s in prometheus.seen] == [
        "max_over_time((up)[300s:])", "min_over_time((up)[300s:])"]


def test_an_unreachable_prometheus_fails_the_check():
    source = PrometheusSource("http://127.0.0.1:9", timeout_s=0.5)
    outcome = evaluate({"metric": "up", "above": 0}, source, UrlAllowList([]))
    assert not outcome.passed and "Prometheus unreachable" in outcome.reason


def test_a_probe_passes_on_its_expected_status(prometheus):
    allow = [prometheus.url("/")]
    ok = judge({"probe": {"url": prometheus.url("/healthz")}}, prometheus, allow)
    assert ok.passed and ok.observed == 200.0
    broken = judge({"probe": {"url": prometheus.url("/broken")}}, prometheus, allow)
    assert not broken.passed and broken.observed == 503.0
    expected = judge({"probe": {"url": prometheus.url("/broken"), "expect_status": [503]}},
                     prometheus, allow)
    assert expected.passed


def test_a_probe_off_the_allow_list_is_never_sent(prometheus):
    outcome = judge({"probe": {"url": prometheus.url("/healthz")}}, prometheus,
                    ["http://127.0.0.1:1/"])
    assert not outcome.passed and outcome.reason.startswith("cannot verify")
    assert prometheus.seen == []


def test_checks_mix_metrics_and_probes(prometheus):
    verify = {"checks": [{"metric": "up", "above": 0.5},
                         {"probe": {"url": prometheus.url("/healthz")}},
                         {"metric": "http_5xx_ratio", "below": 0.01}]}
    outcome = judge(verify, prometheus, [prometheus.url("/")])
    assert not outcome.passed and outcome.reason.startswith("check 3 of 3: http_5xx_ratio")
    assert len(prometheus.seen) == 3


def test_the_static_source_needs_no_server():
    outcome = evaluate({"metric": "http_5xx_ratio", "below": 0.01},
                       StaticSource({"http_5xx_ratio": 0.0}), UrlAllowList([]))
    assert outcome.passed and outcome.observed == 0.0
