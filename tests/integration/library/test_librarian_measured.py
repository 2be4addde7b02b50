"""The librarian learns only plans verified on the component's series (issue 40), on SQLite and
PostgreSQL with Debian's real Prometheus: a check whose query read no series of the component
(``count(nonexistent_total{…}) or vector(0)``) is not a pass; a case closed on a probe alone, or
closed before readings said whether they read series, lends no plan; a case closed on a reading
of the component's series does."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from core.consumers.verifier import Verifier
from core.domain.messages import Topic
from core.library import Library
from core.messaging.consumer import ConsumerRunner
from tests.support.clock import Clock
from tests.support.library import closed_case as closed_by_hand
from tests.support.local_http import Reply, local_server
from tests.support.plan_runs import S, envelope_of, make_app, status
from tests.support.verification import Loop, changed_at, verifying_case

OWN = 'http_5xx_ratio{job="service"}'
"""The component's 5xx ratio: Prometheus scrapes the test's service as job ``service``."""
NOTHING = 'count(nonexistent_total{job="service"}) or vector(0)'
"""Carries the component's label, yet reads none of its series: always 0."""
TITLE = "p95 latency spike on checkout"  # the title of tests.support.cases.open_case


def verify(app: Any, case_id: Any) -> None:
    runner = ConsumerRunner(app.engine, Verifier(app), sleep=lambda _s: None)
    assert runner.deliver(envelope_of(app.engine, case_id, Topic.VERIFY_RUN)) == "done"


def test_only_a_plan_verified_on_the_component_s_series_is_learned(engine, metric_service,
                                                                   prometheus_server):
    metric_service.set("http_5xx_ratio", 0.004)
    prometheus = prometheus_server(metric_service)
    prometheus.wait_for("http_5xx_ratio", lambda values: values == [0.004])
    with local_server({"/healthz": Reply(200, b"ok")}) as server:
        app = make_app(engine, prometheus_url=prometheus.base_url, verify_poll_s=600,
                       default_metric_labels="job=service", http_allowlist=[server.url("/")])
        nothing = verifying_case(app, {"metric": NOTHING, "below": 1, "timeout_s": 30})
        probed = verifying_case(app, {"probe": {"url": server.url("/healthz")}})
        measured = verifying_case(app, {"metric": OWN, "below": 0.01})
        verify(app, probed)
        verify(app, measured)
        clock = Clock(changed_at(app, nothing) + timedelta(seconds=1))
        Loop(app, Verifier(app, clock=clock), clock).until_settled(nothing)

    assert status(app, nothing) == S.PARKED
    [failed] = [row for row in app.cases.timeline(nothing) if row["event"] == "verify_failed"]
    assert 'no data: the query read no series of the component (job="service")' in \
        failed["reason"]
    assert status(app, probed) == S.CLOSED and status(app, measured) == S.CLOSED

    library = Library(app.engine)
    before = make_app(engine)  # a case closed before readings said what they read
    old = closed_by_hand(before, TITLE, "Restart checkout", None, "error_rate below 0.01",
                         series_read=False)
    before.close()
    for case_id in (probed, old):
        assert library.index_case(case_id)
    assert {c["case_id"]: c["series_read"] for c in library.similar_cases(TITLE)} == {
        str(probed): False, str(old): False}
    assert library.best_plan_for(TITLE) is None

    assert library.index_case(measured)
    best = library.best_plan_for(TITLE)
    assert best is not None and best["case_id"] == str(measured)
    app.close()
