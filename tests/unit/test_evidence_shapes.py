"""The verifier's judgement on the static source, the accepted ``verify`` shapes, and the
reading of Prometheus answers (no network here)."""

from __future__ import annotations

import json

import pytest

from core.executor.allowlists import UrlAllowList
from core.executor.evidence import (
    EvidenceMissing,
    StaticSource,
    evaluate,
    prometheus_value,
    source_from_settings,
)
from core.settings import Settings

SOURCE = StaticSource({"error_rate": 0.002, "latency_p95_ms": 640.0, "replicas": 3})
NOTHING = UrlAllowList([])


def judge(verify):
    return evaluate(verify, SOURCE, NOTHING, timeout_s=1.0)


@pytest.mark.parametrize(("verify", "passed", "observed"), [
    ({"metric": "error_rate", "below": 0.01}, True, 0.002),
    ({"metric": "error_rate", "below": 0.001}, False, 0.002),
    ({"metric": "error_rate", "below": 0.002}, False, 0.002),  # strict: equal is not below
    ({"metric": "replicas", "above": 2}, True, 3),
    ({"metric": "replicas", "above": 3}, False, 3),
    ({"metric": "latency_p95_ms", "above": 100, "below": 500}, False, 640.0),
    ({"metric": "latency_p95_ms", "above": 100, "below": 700, "for_s": 300}, True, 640.0),
])
def test_a_metric_threshold(verify, passed, observed):
    outcome = judge(verify)
    assert (outcome.passed, outcome.observed) == (passed, observed)
    assert verify["metric"] in outcome.reason


def test_a_failed_threshold_says_what_was_seen_against_what_was_required():
    outcome = judge({"metric": "latency_p95_ms", "below": 500, "for_s": 300})
    assert outcome.reason == "latency_p95_ms = 640 over 300s, not below 500"


def test_a_metric_without_data_fails_with_the_reason():
    outcome = judge({"metric": "queue_depth", "below": 10})
    assert not outcome.passed and outcome.observed is None
    assert "no value for 'queue_depth'" in outcome.reason


def test_every_check_must_pass_and_the_first_failure_is_the_reason():
    ok = judge({"checks": [{"metric": "error_rate", "below": 0.01},
                           {"metric": "replicas", "above": 1}]})
    assert ok.passed and ok.reason == "all 2 checks passed"
    bad = judge({"checks": [{"metric": "error_rate", "below": 0.01},
                            {"metric": "latency_p95_ms", "below": 500}]})
    assert not bad.passed and bad.observed == 640.0
    assert bad.reason.startswith("check 2 of 2: latency_p95_ms = 640")


@pytest.mark.parametrize(("verify", "why"), [
    (None, "the verify block must be an object, not NoneType"),
    ("error_rate < 0.01", "the verify block must be an object, not str"),
    ({}, "expected 'metric', 'probe' or 'checks'"),
    ({"metrc": "error_rate", "below": 1}, "expected 'metric', 'probe' or 'checks'"),
    ({"metric": "error_rate"}, "needs 'below' or 'above'"),
    ({"metric": "error_rate", "bellow": 0.01}, "bellow"),
    ({"metric": "error_rate", "below": "0.01"}, "below"),
    ({"metric": "error_rate", "below": float("nan")}, "below"),
    ({"metric": "", "below": 1}, "metric"),
    ({"probe": "healthz", "expect_status": 200}, "expect_status"),
    ({"probe": {"url": "http://127.0.0.1:1/", "expect_status": "200"}}, "expect_status"),
    ({"checks": []}, "checks"),
    ({"checks": [{"checks": [{"metric": "error_rate", "below": 1}]}]}, "expected 'metric'"),
    ({"checks": ["error_rate"]}, "a check must be an object"),
])
def test_shapes_it_cannot_verify_fail_clearly_without_raising(verify, why):
    outcome = judge(verify)
    assert not outcome.passed and outcome.observed is None
    assert "cannot verify: " in outcome.reason
    assert why in outcome.reason


def test_a_probe_off_the_allow_list_is_not_called():
    outcome = evaluate({"probe": {"url": "http://127.0.0.1:9/healthz"}}, SOURCE,
                       UrlAllowList(["http://127.0.0.1:8081/"]), timeout_s=1.0)
    assert not outcome.passed
    assert "not on the http allow-list" in outcome.reason


def answer(result_type, result, status="success"):
    return json.dumps({"status": status, "data": {"resultType": result_type,
                                                  "result": result}}).encode()


def test_prometheus_vectors_and_scalars():
    vector = answer("vector", [{"metric": {"pod": "a"}, "value": [1.0, "0.5"]},
                               {"metric": {"pod": "b"}, "value": [1.0, "0.25"]}])
    assert prometheus_value(vector, "max") == 0.5
    assert prometheus_value(vector, "min") == 0.25
    assert prometheus_value(answer("scalar", [1.0, "42"]), "max") == 42.0
    assert prometheus_value(answer("vector", [{"metric": {}, "value": [1, "+Inf"]}]),
                            "max") == float("inf")


@pytest.mark.parametrize(("body", "why"), [
    (answer("vector", []), "no data"),
    (answer("vector", [{"metric": {}, "value": [1.0, "NaN"]}]), "NaN"),
    (answer("matrix", [{"metric": {}, "values": [[1.0, "1"]]}]), "matrix"),
    (json.dumps({"status": "error", "errorType": "bad_data",
                 "error": "parse error at char 3"}).encode(), "parse error at char 3"),
    (b"<html>502 Bad Gateway</html>", "without JSON"),
    (json.dumps({"status": "success", "data": {}}).encode(), "not understood"),
])
def test_prometheus_answers_without_a_value(body, why):
    with pytest.raises(EvidenceMissing, match=why):
        prometheus_value(body, "max")


def test_the_source_follows_settings():
    assert isinstance(source_from_settings(Settings(_env_file=None, prometheus_url=None),
                                           {"x": 1.0}), StaticSource)
    prometheus = source_from_settings(Settings(_env_file=None,
                                               prometheus_url="http://127.0.0.1:9090"))
    assert type(prometheus).__name__ == "PrometheusSource"
