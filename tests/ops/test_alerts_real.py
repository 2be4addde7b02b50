"""The whole alert chain with the real peers on 127.0.0.1: Prometheus scrapes the checkout
service and opsgate itself, a rule fires on the checkout p95, Alertmanager sends its group to
``POST /alerts/alertmanager`` with the bearer token, one case opens; when the p95 recovers,
Alertmanager's resolved notification becomes an ``alert_resolved`` note on that case."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine, select

from core.bootstrap import App, bootstrap
from core.db.tables import case_timeline, ops_case
from core.settings import Settings
from tests.support.metrics import STAND_IN_METRICS
from tests.support.peers import (
    BAD_P95_S,
    GAUGE,
    HEALTHY_P95_S,
    Alertmanager,
    MetricService,
    Prometheus,
    ScrapeJob,
    alert_rule,
    poll,
    serve_api,
)

TOKEN = "am-real-secret"
RULE = alert_rule("CheckoutSlow", f"{GAUGE} > 1", summary="checkout p95 over 1 s")


@pytest.fixture
def app(pg_engine: Engine) -> Iterator[App]:
    made = bootstrap(Settings(static_metrics=STAND_IN_METRICS,
                              _env_file=None, redis_url=None, prometheus_url=None,
                              alert_token=TOKEN), engine=pg_engine)
    yield made
    made.close()


def cases(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(select(ops_case)).mappings()]


def resolutions(engine: Engine, case_id: UUID) -> list[dict[str, Any]]:
    query = select(case_timeline).where(case_timeline.c.case_id == case_id,
                                        case_timeline.c.event == "alert_resolved")
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]


def test_a_firing_rule_opens_one_case_and_its_resolution_is_noted_on_it(
        app: App, pg_engine: Engine, metric_service: MetricService,
        prometheus_server: Callable[..., Prometheus],
        alertmanager_server: Callable[..., Alertmanager]):
    with serve_api(app) as api:
        alertmanager = alertmanager_server(f"{api}/alerts/alertmanager", TOKEN)
        jobs = [ScrapeJob("checkout", [metric_service.target]),
                ScrapeJob("opsgate", [api.removeprefix("http://")])]
        prometheus = prometheus_server(jobs, rules=[RULE], alertmanager=alertmanager)
        prometheus.wait_for('up{job="opsgate"}', lambda values: values == [1.0])
        prometheus.wait_for(GAUGE, lambda values: values == [HEALTHY_P95_S])
        assert cases(pg_engine) == []

        metric_service.set(GAUGE, BAD_P95_S)
        [case] = poll(lambda: cases(pg_engine), 30, "Alertmanager's notification opens a case")
        assert case["title"] == "CheckoutSlow: checkout p95 over 1 s"
        assert case["severity"] == "SEV1" and case["status"] == "NEW"

        metric_service.set(GAUGE, HEALTHY_P95_S)
        [note] = poll(lambda: resolutions(pg_engine, case["id"]), 30,
                      "Alertmanager's resolved notification is noted on the case")
        assert note["reason"] == "CheckoutSlow resolved: checkout p95 over 1 s"
        assert note["actor"] == "alertmanager"
        assert [c["id"] for c in cases(pg_engine)] == [case["id"]]  # the group's one case
