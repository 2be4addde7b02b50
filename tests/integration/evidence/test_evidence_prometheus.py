"""The verifier's evidence over real HTTP on 127.0.0.1: windows and mixed checks against
Debian's real Prometheus, an unreachable Prometheus, and allow-listed probes of a local service.
Prometheus' other answers (several series, scalars, no data, refusals, windows over time) are
tested in ``test_peers_prometheus.py``."""

from __future__ import annotations

import pytest

from core.evidence.prometheus import PrometheusSource
from core.evidence.reading import evaluate
from core.evidence.stand_in import StaticSource
from core.outbound.allowlists import UrlAllowList
from tests.support.local_http import Reply, local_server


@pytest.fixture
def service():
    """The probe targets: a healthy and a broken endpoint (a service, not Prometheus)."""
    with local_server({"/healthz": Reply(200, b"ok"), "/broken": Reply(503, b"no")}) as srv:
        yield srv


@pytest.fixture
def prometheus(metric_service, prometheus_server):
    """Debian's Prometheus scraping a service whose 5xx ratio is 0.02."""
    metric_service.set("http_5xx_ratio", 0.02)
    server = prometheus_server(metric_service)
    # A subquery's steps are aligned to the evaluation interval: a window has data a step or so
    # after the first sample, not at once.
    server.wait_for("max_over_time((http_5xx_ratio)[300s:])", lambda values: values == [0.02])
    return server


def judge(verify, prometheus, allow=()):
    return evaluate(verify, PrometheusSource(prometheus.base_url, timeout_s=2.0),
                    UrlAllowList(allow), timeout_s=2.0)


def test_a_window_is_judged_on_the_worst_value_over_it(prometheus):
    held = judge({"metric": "http_5xx_ratio", "above": 0.01, "below": 1, "for_s": 300},
                 prometheus)
    assert held.passed and held.observed == 0.02, held
    outcome = judge({"metric": "http_5xx_ratio", "below": 0.01, "for_s": 60}, prometheus)
    assert not outcome.passed and outcome.observed == 0.02


def test_an_unreachable_prometheus_fails_the_check():
    source = PrometheusSource("http://127.0.0.1:9", timeout_s=0.5)
    outcome = evaluate({"metric": "up", "above": 0}, source, UrlAllowList([]))
    assert not outcome.passed and "Prometheus unreachable" in outcome.reason


def probe(verify, service, allow):
    return evaluate(verify, StaticSource({}), UrlAllowList(allow), timeout_s=2.0)


def test_a_probe_passes_on_its_expected_status(service):
    allow = [service.url("/")]
    ok = probe({"probe": {"url": service.url("/healthz")}}, service, allow)
    assert ok.passed and ok.observed == 200.0
    broken = probe({"probe": {"url": service.url("/broken")}}, service, allow)
    assert not broken.passed and broken.observed == 503.0
    expected = probe({"probe": {"url": service.url("/broken"), "expect_status": [503]}},
                     service, allow)
    assert expected.passed


def test_a_probe_off_the_allow_list_is_never_sent(service):
    outcome = probe({"probe": {"url": service.url("/healthz")}}, service,
                    ["http://127.0.0.1:1/"])
    assert not outcome.passed and outcome.reason.startswith("cannot verify")
    assert service.seen == []


def test_checks_mix_metrics_and_probes(prometheus, service):
    verify = {"checks": [{"metric": "up", "above": 0.5},
                         {"probe": {"url": service.url("/healthz")}},
                         {"metric": "http_5xx_ratio", "below": 0.01}]}
    outcome = judge(verify, prometheus, [service.url("/")])
    assert not outcome.passed and outcome.reason.startswith("check 3 of 3: http_5xx_ratio")
    assert [s.path for s in service.seen] == ["/healthz"]


def test_the_static_source_needs_no_server():
    outcome = evaluate({"metric": "http_5xx_ratio", "below": 0.01},
                       StaticSource({"http_5xx_ratio": 0.0}), UrlAllowList([]))
    assert outcome.passed and outcome.observed == 0.0
