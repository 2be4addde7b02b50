"""The verifier's judgement on the static source, the accepted ``verify`` shapes, and the
reading of Prometheus answers (no network here)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from core.evidence.configured import source_from_settings
from core.evidence.prometheus import duration, prometheus_value
from core.evidence.reading import evaluate
from core.evidence.scope import Moment
from core.evidence.sources import EvidenceMissing
from core.evidence.stand_in import StaticSource
from core.outbound.allowlists import UrlAllowList
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
    assert ok.passed and ok.reason.startswith("all 2 checks passed: error_rate = ")
    assert ", below 0.01; replicas = " in ok.reason  # every check with its reading
    bad = judge({"checks": [{"metric": "error_rate", "below": 0.01},
                            {"metric": "latency_p95_ms", "below": 500}]})
    assert not bad.passed and bad.observed == 640.0
    assert bad.reason.startswith("check 2 of 2: latency_p95_ms = 640")
    assert "(check 1 of 2 holds: error_rate = " in bad.reason  # the check that held, shown


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
    assert source_from_settings(Settings(_env_file=None, prometheus_url=None)) is None
    assert isinstance(source_from_settings(Settings(_env_file=None, prometheus_url=None,
                                                    static_metrics={"x": 1.0})), StaticSource)
    prometheus = source_from_settings(Settings(_env_file=None,
                                               prometheus_url="http://127.0.0.1:9090"))
    assert type(prometheus).__name__ == "PrometheusSource"


def test_a_stand_in_with_before_change_values_reacts_to_the_change():
    since = datetime(2026, 1, 1, tzinfo=UTC)
    world = StaticSource({"latency_p95_ms": 120.0}, {"latency_p95_ms": 2400.0}, settle_s=10)
    assert world.read("latency_p95_ms", at=since + timedelta(hours=1)) == 2400.0  # no change
    changed = world.after_change(since)
    assert changed.read("latency_p95_ms", at=since + timedelta(seconds=5)) == 2400.0
    assert changed.read("latency_p95_ms", at=since + timedelta(seconds=10)) == 120.0
    # A window reaching back before it settled reads the worse of the two.
    late = since + timedelta(seconds=30)
    assert changed.read("latency_p95_ms", over_s=25, at=late) == 2400.0
    assert changed.read("latency_p95_ms", over_s=25, worst="min", at=late) == 120.0
    assert changed.read("latency_p95_ms", over_s=15, at=late) == 120.0


# -- one reading after a change ------------------------------------------------------------------

CHANGE = datetime(2026, 11, 24, 14, 0, tzinfo=UTC)


class ByTime:
    """Answers by evaluation time: ``before`` up to the change, ``after`` from then on; over a
    window, the worst second of (at - over_s, at]. Records what it was asked."""

    def __init__(self, before: float, after: float) -> None:
        self.before, self.after = before, after
        self.asked: list[tuple[float | None, datetime | None]] = []

    def read(self, query, *, over_s=None, worst="max", at=None):
        self.asked.append((over_s, at))
        seconds = [at - timedelta(seconds=s) for s in range(max(1, int(over_s or 1)))]
        values = [self.before if moment <= CHANGE else self.after for moment in seconds]
        return max(values) if worst == "max" else min(values)


def reading(verify, source, seconds_after: float, scale: float = 1.0):
    moment = Moment(at=CHANGE + timedelta(seconds=seconds_after), since=CHANGE, scale=scale)
    return evaluate(verify, source, NOTHING, timeout_s=1.0, moment=moment)


def test_before_its_window_has_passed_a_check_is_pending_with_the_value_now():
    source = ByTime(before=2.4, after=0.5)
    outcome = reading({"metric": "checkout_p95", "below": 1, "for_s": 300}, source, 30)
    assert outcome.state == "pending" and outcome.observed == 0.5
    assert outcome.reason == "checkout_p95 = 0.5 now, waiting (30s of the 300s window after " \
                             "the change)"
    assert outcome.waiting_for == "checkout_p95 below 1 for 300s after the change"
    assert source.asked == [(None, CHANGE + timedelta(seconds=30))]


def test_once_its_window_has_passed_a_check_is_judged_on_the_window_ending_now():
    source = ByTime(before=2.4, after=0.5)
    held = reading({"metric": "checkout_p95", "below": 1, "for_s": 300}, source, 300)
    assert held.passed and held.reason == "checkout_p95 = 0.5 over 300s, below 1"
    assert source.asked == [(300, CHANGE + timedelta(seconds=300))]
    # Judged as it stands (no change time), the window would reach back before the fix.
    stale = evaluate({"metric": "checkout_p95", "below": 1, "for_s": 300}, source, NOTHING,
                     moment=Moment(at=CHANGE + timedelta(seconds=30)))
    assert stale.state == "pending" and stale.reason == "checkout_p95 = 2.4 over 300s, not " \
                                                        "below 1"


def test_a_check_without_a_window_is_judged_on_its_reading_at_once():
    outcome = reading({"metric": "checkout_p95", "below": 1}, ByTime(2.4, 0.5), 1)
    assert outcome.passed and outcome.reason == "checkout_p95 = 0.5, below 1"


def test_a_time_scale_shrinks_every_window():
    block = {"checks": [{"metric": "a", "below": 1, "for_s": 60},
                        {"metric": "b", "below": 1, "for_s": 300}]}
    waiting = reading(block, ByTime(2.4, 0.5), 1.5, scale=0.01)
    assert waiting.state == "pending"
    assert waiting.reason == "check 2 of 2: b = 0.5 now, waiting (1.5s of the 3s window after " \
                             "the change) (check 1 of 2 holds: a = 0.5 over 0.6s, below 1)"
    assert reading(block, ByTime(2.4, 0.5), 3, scale=0.01).reason == \
        "all 2 checks passed: a = 0.5 over 0.6s, below 1; b = 0.5 over 3s, below 1"


@pytest.mark.parametrize(("seconds", "text"), [(300, "300s"), (3.0, "3s"), (0.6, "600ms"),
                                               (0.0001, "1ms")])
def test_a_window_as_a_prometheus_duration(seconds, text):
    assert duration(seconds) == text
