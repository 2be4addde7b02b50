"""No verification without evidence: with no metrics source configured (neither
OPSGATE_PROMETHEUS_URL nor a stand-in table in OPSGATE_STATIC_METRICS) the ``plan_ready`` guard
refuses a plan with a metric check, in one line saying how to configure one; a probe-only plan
is accepted. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from core.bootstrap import bootstrap
from core.domain.fsm import CaseEvent, CaseStatus
from core.errors import GuardFailed
from core.settings import Settings
from tests.support.cases import PLAN, case_in, command, key, snapshot

NO_SOURCE = ("the plan's metric check cannot be judged: no metrics source is configured (set "
             "OPSGATE_PROMETHEUS_URL to your Prometheus, or OPSGATE_STATIC_METRICS to a stand-in "
             "table: JSON, metric name → number)")
PROBE_ONLY = {**PLAN, "verify": {"probe": {"url": "http://127.0.0.1:8081/healthz"}}}


@pytest.fixture
def unsourced(engine):
    """An app as the environment's defaults build it: no Prometheus, no stand-in table."""
    app = bootstrap(Settings(_env_file=None, redis_url=None), engine=engine)
    yield app
    app.close()


def test_without_a_metrics_source_plan_ready_refuses_a_metric_check_in_one_line(unsourced):
    case_id = case_in(unsourced.cases, CaseStatus.PLANNING)
    before = snapshot(unsourced.engine, case_id)
    reply = unsourced.cases.transition(command(case_id, CaseEvent.PLAN_READY), key())

    with pytest.raises(GuardFailed) as refused:
        reply.data()
    assert refused.value.message == NO_SOURCE and "\n" not in NO_SOURCE
    assert unsourced.cases.get_case(case_id)["status"] == CaseStatus.PLANNING
    last = unsourced.cases.timeline(case_id)[-1]
    assert (last["event"], last["meta"]["outcome"], last["reason"]) == (
        "plan_ready", "refused", NO_SOURCE)
    after = snapshot(unsourced.engine, case_id)
    assert after["case"] == before["case"]
    assert (after["outbox"], after["plan_proposed"]) == (before["outbox"],
                                                         before["plan_proposed"])
    assert after["case_timeline"] == before["case_timeline"] + 1


def test_without_a_metrics_source_a_probe_only_plan_is_accepted(unsourced):
    case_id = case_in(unsourced.cases, CaseStatus.PLANNING)
    reply = unsourced.cases.transition(command(case_id, CaseEvent.PLAN_READY, plan=PROBE_ONLY),
                                       key())
    assert reply.ok, reply.body
    assert unsourced.cases.get_case(case_id)["status"] == CaseStatus.WAIT_GATE


@pytest.mark.parametrize("source", [{"static_metrics": {"error_rate": 0.001}},
                                    {"prometheus_url": "http://127.0.0.1:9090",
                                     "default_metric_labels": "job=service"}])
def test_a_configured_source_admits_the_metric_check(engine, source):
    app = bootstrap(Settings(_env_file=None, redis_url=None, **source), engine=engine)
    case_id = case_in(app.cases, CaseStatus.PLANNING)
    if "static_metrics" in source:
        ready = command(case_id, CaseEvent.PLAN_READY)
    else:  # Prometheus: a query of the component's series
        ready = command(case_id, CaseEvent.PLAN_READY, plan={
            **PLAN, "verify": {"metric": 'error_rate{job="service"}', "below": 0.01}})
    assert app.cases.transition(ready, key()).ok
    app.close()
