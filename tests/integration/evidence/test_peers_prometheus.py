"""The analyst and the verifier against a real Prometheus (Debian's, on 127.0.0.1) scraping a
service whose checkout p95 the test sets: a real ``query_range`` around a case's start, real
instant values and refusals, and a ``for_s`` window that passes only once the good samples
cover it (time matters, which a canned answer cannot show)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from itertools import pairwise
from typing import Any

import httpx
import pytest

from core.analysis.catalog import MetricSpec
from core.analysis.findings import find
from core.analysis.sources import PrometheusRangeSource
from core.consumers.analyst import Analyst
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.evidence.outcome import VerifyOutcome
from core.evidence.prometheus import PrometheusSource
from core.evidence.reading import evaluate
from core.messaging.consumer import ConsumerRunner
from core.outbound.allowlists import UrlAllowList
from tests.support.apps import ON_POSTGRES
from tests.support.cases import command, key, open_case
from tests.support.peers import BAD_P95_S, GAUGE, HEALTHY_P95_S, MetricService, Prometheus, poll
from tests.support.plan_runs import envelope_of, notes, status

P95 = MetricSpec(GAUGE, GAUGE, "level", ("checkout",))
CATALOG = {GAUGE: {"query": GAUGE, "kind": "level", "words": ["checkout"]}}


@pytest.fixture
def prometheus(prometheus_server: Callable[..., Prometheus],
               metric_service: MetricService) -> Prometheus:
    """Prometheus scraping ``metric_service`` every second, its first sample already in."""
    server = prometheus_server(metric_service)
    server.wait_for(GAUGE, lambda values: values == [HEALTHY_P95_S])
    return server


def judge(verify: dict[str, Any], prometheus: Prometheus) -> VerifyOutcome:
    return evaluate(verify, PrometheusSource(prometheus.base_url, timeout_s=5.0),
                    UrlAllowList(()), timeout_s=5.0)


def samples_within(prometheus: Prometheus, seconds: int) -> float:
    values = prometheus.values(f"count_over_time({GAUGE}[{seconds}s])")
    return values[0] if values else 0.0


# -- the analyst ------------------------------------------------------------------------------


@pytest.fixture
def app_options(prometheus: Prometheus) -> dict[str, Any]:
    """The composition root reading ``checkout_p95_seconds`` from the real Prometheus."""
    return {"prometheus_url": prometheus.base_url, "analysis_before_s": 300,
            "analysis_after_s": 60, "analysis_step_s": 1, "metric_catalog": CATALOG}


@ON_POSTGRES
def test_a_p95_step_is_read_around_the_case_start_and_noted_as_a_shift(
        app, prometheus, metric_service):
    poll(lambda: samples_within(prometheus, 60) >= 8, 20, "8 healthy samples (the baseline)")
    metric_service.set(GAUGE, BAD_P95_S)
    case_id = open_case(app.cases, "CheckoutDegraded")
    assert app.cases.transition(command(case_id, CaseEvent.START_ANALYSIS), key()).ok
    incident_at = datetime.fromisoformat(str(app.cases.get_case(case_id)["created_at"]))
    source = PrometheusRangeSource(prometheus.base_url, before_s=300, after_s=60, step_s=1,
                                   timeout_s=5.0)

    def bad_points() -> int:
        return sum(1 for t, v in source.read(P95, incident_at) if t >= 0 and v == BAD_P95_S)

    poll(lambda: bad_points() >= 7, 20, "7 bad points after the case start")
    points = source.read(P95, incident_at)
    before = [v for t, v in points if t < 0]
    after = [v for t, v in points if t >= 0]
    assert len(before) >= 6 and set(before) == {HEALTHY_P95_S}
    assert set(after) <= {HEALTHY_P95_S, BAD_P95_S} and after[-1] == BAD_P95_S
    offsets = [t for t, _ in points]
    assert all(abs((b - a) - 1.0) < 1e-6 for a, b in pairwise(offsets))
    assert offsets[0] >= -300 and offsets[-1] <= 60

    [finding] = find([P95], source, incident_at)["findings"]
    assert finding["statistic"] == "shift" and finding["baseline"] == HEALTHY_P95_S
    assert finding["current"] > 1.5 and -2 <= finding["changed_at_s"] <= 3
    graph = httpx.get(finding["link"], timeout=5, follow_redirects=True)
    assert graph.status_code == 200  # the graph page of the same query (Debian: classic UI)

    runner = ConsumerRunner(app.engine, Analyst(app), sleep=lambda _s: None)
    assert runner.deliver(envelope_of(app.engine, case_id, Topic.ANALYSIS_RUN)) == "done"
    [note] = notes(app, case_id, "analysis_findings")
    [noted] = note["context"]["findings"]
    assert noted["metric"] == GAUGE and noted["statistic"] == "shift"
    assert note["reason"].startswith(f"{GAUGE} stepped up")
    assert status(app, case_id) == CaseStatus.PLANNING


# -- the verifier -----------------------------------------------------------------------------


def test_instant_values_no_data_and_a_refused_query_as_prometheus_answers_them(
        prometheus_server: Callable[..., Prometheus], metric_service: MetricService):
    """Two replicas of the service: one slow, one healthy; the worst one counts."""
    with MetricService() as healthy_replica:
        metric_service.set(GAUGE, BAD_P95_S)
        prometheus = prometheus_server([metric_service.target, healthy_replica.target])
        prometheus.wait_for(GAUGE, lambda values: values == [HEALTHY_P95_S, BAD_P95_S])

        slow = judge({"metric": GAUGE, "below": 1}, prometheus)
        assert not slow.passed and slow.observed == BAD_P95_S
        assert slow.reason == f"{GAUGE} = 2.4, not below 1"
        floor = judge({"metric": GAUGE, "above": 0.1}, prometheus)
        assert floor.passed and floor.observed == HEALTHY_P95_S  # the lowest, for "above"
        scaled = judge({"metric": f"max({GAUGE}) * 1000", "above": 2000, "below": 3000},
                       prometheus)
        assert scaled.passed and scaled.observed == pytest.approx(2400)
        scalar = judge({"metric": f"scalar(min({GAUGE}))", "below": 1}, prometheus)
        assert scalar.passed and scalar.observed == HEALTHY_P95_S
        up = judge({"metric": 'up{job="service"}', "above": 0.5}, prometheus)
        assert up.passed and up.observed == 1.0

    absent = judge({"metric": "checkout_p99_seconds", "below": 1}, prometheus)
    assert not absent.passed and "no data" in absent.reason
    # PromQL that opsgate checks and Prometheus refuses to run (an invalid regular expression).
    refused = judge({"metric": f'label_replace({GAUGE}, "a", "b", "c", "(")', "below": 1},
                    prometheus)
    assert not refused.passed and "Prometheus refused the query (HTTP" in refused.reason
    assert "regular expression" in refused.reason
    # What is not PromQL is never sent (core/domain/promql.py).
    malformed = judge({"metric": f"sum({GAUGE}", "below": 1}, prometheus)
    assert malformed.state == "cannot" and "not PromQL" in malformed.reason


def test_a_window_fails_until_good_samples_cover_it_then_passes(prometheus, metric_service):
    """The gauge drops from 2.4 to 0.2: the instant check passes at the first good sample, the
    5 s window keeps failing on the bad samples still inside it, and passes only about 5 s
    later. (The old canned Prometheus answered the same whatever the window.)"""
    windowed = {"metric": GAUGE, "below": 1, "for_s": 5}
    metric_service.set(GAUGE, BAD_P95_S)
    prometheus.wait_for(f"min_over_time({GAUGE}[5s])", lambda values: values == [BAD_P95_S])
    assert not judge(windowed, prometheus).passed

    metric_service.set(GAUGE, HEALTHY_P95_S)
    fixed_at = time.time()
    prometheus.wait_for(GAUGE, lambda values: values == [HEALTHY_P95_S])
    assert judge({"metric": GAUGE, "below": 1}, prometheus).passed
    failures: list[VerifyOutcome] = []

    def window_passes() -> VerifyOutcome | None:
        outcome = judge(windowed, prometheus)
        if outcome.passed:
            return outcome
        failures.append(outcome)
        return None

    passed = poll(window_passes, 15, "the 5 s window passes")
    waited = time.time() - fixed_at
    assert failures, "the window passed at the first good sample"
    assert {f.observed for f in failures} == {BAD_P95_S}
    assert failures[0].reason == f"{GAUGE} = 2.4 over 5s, not below 1"
    assert passed.observed == HEALTHY_P95_S and passed.reason == f"{GAUGE} = 0.2 over 5s, below 1"
    assert 3.9 <= waited <= 12, f"the window passed {waited:.1f} s after the fix"

