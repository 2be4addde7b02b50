"""Bounded PromQL (issue 24, finding 2) on real SQLite and PostgreSQL and Debian's real
Prometheus: ``plan_ready`` refuses a verify query that breaks the bounds, with its reason, before
anyone approves; every query carries Prometheus' own ``timeout``, which the server honours; and a
reading on which Prometheus timed out is not repeated at every poll: the verifier backs off, and
the timeline says so. Time is a clock the test moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.analysis.catalog import MetricSpec
from core.analysis.sources import PrometheusRangeSource
from core.consumers.verifier import MAX_BACKOFF_S, Verifier
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.promql import QueryBounds
from core.errors import GuardFailed
from core.evidence.prometheus import PrometheusSource
from core.evidence.sources import QueryTimedOut
from tests.support.cases import PLAN, case_in, command, key, snapshot
from tests.support.clock import Clock
from tests.support.plan_runs import S, make_app, notes, status
from tests.support.verification import Loop, changed_at, next_reading_at, verifying_case

ISSUE_VERIFY = {"metric": "count(count_over_time({__name__=~\".+\"}[10000d:1s]))", "below": 1e12}
"""The issue's payload, as written: it took a real Prometheus over 15 s and 9.8 GB."""
NOWHERE = "http://127.0.0.1:9"  # plan_ready sends no query: a Prometheus need not be listening
TIMES_OUT = 1e-9
"""Prometheus' ``timeout`` of one nanosecond: any query has run out of time before it starts."""


def refused_plan(app, case_id, verify) -> GuardFailed:
    reply = app.cases.transition(command(case_id, CaseEvent.PLAN_READY,
                                         plan={**PLAN, "verify": verify}), key())
    with pytest.raises(GuardFailed) as refused:
        reply.data()
    return refused.value


def test_plan_ready_refuses_the_issue_s_verify_query_with_its_reason(engine):
    app = make_app(engine, prometheus_url=NOWHERE)
    case_id = case_in(app.cases, CaseStatus.PLANNING)
    before = snapshot(app.engine, case_id)

    refused = refused_plan(app, case_id, ISSUE_VERIFY)

    reason = refused.message
    assert reason.startswith("the plan's verify query would not be sent to Prometheus: "
                             "verify.metric: refused: the subquery range 10000d is longer than "
                             "the 3600s allowed (OPSGATE_PROMQL_MAX_RANGE_S); the subquery step "
                             "1s is finer than the 10s allowed"), reason
    assert 'the selector {__name__=~".+"} matches __name__ with =~' in reason
    assert "\n" not in reason
    assert refused.details["problems"][0].startswith("plan.verify.metric: refused:")
    assert app.cases.get_case(case_id)["status"] == CaseStatus.PLANNING
    last = app.cases.timeline(case_id)[-1]
    assert (last["event"], last["meta"]["outcome"], last["reason"]) == (
        "plan_ready", "refused", reason)
    after = snapshot(app.engine, case_id)
    assert (after["outbox"], after["plan_proposed"]) == (before["outbox"],
                                                         before["plan_proposed"])
    app.close()


def test_plan_ready_refuses_a_selector_over_a_tenant_the_case_does_not_own(engine):
    app = make_app(engine, prometheus_url=NOWHERE, promql_scope_label="tenant", tenant="acme",
                   default_metric_labels="job=service")
    case_id = case_in(app.cases, CaseStatus.PLANNING)
    assert app.cases.get_case(case_id)["tenant"] == "acme"

    other = refused_plan(app, case_id, {"metric": '{tenant="other"}', "below": 1})
    assert 'the selector {tenant="other"} reads tenant="other"; this case\'s tenant is "acme"' \
        in other.message
    unscoped = refused_plan(app, case_id, {"metric": 'checkout_p95{job="service"}', "below": 1})
    assert unscoped.message.endswith('the selector checkout_p95{job="service"} has no '
                                     'tenant="acme": every selector must carry the case\'s tenant')

    own = {**PLAN, "verify": {"metric": 'checkout_p95{tenant="acme", job="service"}',
                              "below": 1}}
    assert app.cases.transition(command(case_id, CaseEvent.PLAN_READY, plan=own), key()).ok
    app.close()


def test_with_a_stand_in_table_no_query_is_sent_and_names_are_not_bounded(engine):
    """The stand-in table's keys are names, not PromQL: nothing reaches a Prometheus."""
    app = make_app(engine, static_metrics={"checkout_p95": 0.1}, promql_scope_label="tenant")
    case_id = case_in(app.cases, CaseStatus.PLANNING)
    plan = {**PLAN, "verify": {"metric": "checkout_p95", "below": 1}}
    assert app.cases.transition(command(case_id, CaseEvent.PLAN_READY, plan=plan), key()).ok
    app.close()


# -- Prometheus' own timeout --------------------------------------------------------------------


@pytest.fixture
def prometheus(metric_service, prometheus_server):
    """Debian's Prometheus scraping a service whose 5xx ratio is 0.02."""
    metric_service.set("http_5xx_ratio", 0.02)
    server = prometheus_server(metric_service)
    server.wait_for("http_5xx_ratio", lambda values: values == [0.02])
    return server


def test_every_query_carries_prometheus_own_timeout_which_the_server_honours(prometheus):
    answered = PrometheusSource(prometheus.base_url, bounds=QueryBounds(timeout_s=5))
    assert answered.read("http_5xx_ratio") == 0.02

    hurried = PrometheusSource(prometheus.base_url, bounds=QueryBounds(timeout_s=TIMES_OUT))
    with pytest.raises(QueryTimedOut) as timed_out:
        hurried.read("http_5xx_ratio")
    # The server's own answer (HTTP 503, errorType "timeout"), not the client giving up.
    assert timed_out.value.reason.startswith("Prometheus timed out on the query (HTTP 503)")

    # The analyst's query_range too.
    spec = MetricSpec("http_5xx_ratio", "http_5xx_ratio", "ratio", ("error",))
    ranged = PrometheusRangeSource(prometheus.base_url, before_s=300, after_s=60, step_s=1,
                                   bounds=QueryBounds(timeout_s=TIMES_OUT))
    with pytest.raises(QueryTimedOut, match=r"timed out on the query \(HTTP 503\)"):
        ranged.read(spec, datetime.now(UTC))
    assert ranged.scoped(None).bounds.timeout_s == TIMES_OUT


def test_a_reading_that_timed_out_is_read_again_later_and_later(engine, prometheus):
    app = make_app(engine, prometheus_url=prometheus.base_url, promql_timeout_s=TIMES_OUT,
                   verify_poll_s=15, default_metric_labels="job=service")
    case_id = verifying_case(app, {"metric": 'http_5xx_ratio{job="service"}', "below": 0.01})
    clock = Clock(changed_at(app, case_id) + timedelta(seconds=1))
    loop = Loop(app, Verifier(app, clock=clock), clock)

    waits = []
    for _reading in range(4):
        loop.relay.drain()
        following = next_reading_at(engine, case_id)
        waits.append((following - clock.now).total_seconds())
        clock.now = following

    assert waits == [30, 60, 120, 240]  # the poll is 15 s: doubled after each timeout in a row
    assert status(app, case_id) == S.VERIFYING
    readings = notes(app, case_id, "verify_reading")
    assert [r["context"]["timeouts"] for r in readings] == [1, 2, 3, 4]
    assert all(r["context"]["timed_out"] for r in readings)
    first, second = readings[0]["reason"], readings[1]["reason"]
    assert first.startswith('http_5xx_ratio{job="service"}: Prometheus timed out on the query '
                            "(HTTP 503)")
    assert first.endswith(". Prometheus timed out on this reading, so the next reading waits "
                          "30s instead of 15s")
    assert second.endswith(". Prometheus timed out on 2 readings in a row, so the next reading "
                           "waits 60s instead of 15s")
    app.close()


def test_the_backoff_is_bounded(engine):
    app = make_app(engine, verify_poll_s=15)
    verifier = Verifier(app)
    assert [verifier.pause(k).total_seconds() for k in (0, 1, 2, 5, 6, 40, 10**6)] == [
        15, 30, 60, 480, MAX_BACKOFF_S, MAX_BACKOFF_S, MAX_BACKOFF_S]
    app.close()
