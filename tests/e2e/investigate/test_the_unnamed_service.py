"""A report that names no service (issue 41.5), on SQLite and on PostgreSQL: the offline planner
finds no component by the report's words, so it looks at what is firing (Debian's Alertmanager,
by each component's labels) and whose metrics moved (Debian's Prometheus, a recorded history),
names the candidates in the thread in a sentence, names the most anomalous on the case and
investigates it — never the top runbook's template. When nothing in the catalog shows a
symptom, it proposes no change and asks a person to name the service."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from agent.offline import OfflinePlannerModel
from agent.planner import AgentPlanner
from core.domain.fsm import CaseStatus
from core.messaging.consumer import ConsumerRunner
from tests.support.agents import agent_app, case_at, make_agent, plan_delivery
from tests.support.peers import Alertmanager, Prometheus

STEP_S = 15
NOWHERE = "http://127.0.0.1:9/hook"
SERVICES = ("bookings", "payments-api", "search-api")


def catalog(folder: Path) -> Path:
    """Three components, each with its metric labels; none named by the report's words."""
    folder.mkdir()
    docs = [f"""apiVersion: backstage.io/v1alpha1
kind: Component
metadata:
  name: {name}
  title: {name}
  description: The {name} service.
  annotations:
    backstage.io/kubernetes-id: {name}
    backstage.io/kubernetes-namespace: prod
    opsgate.dev/metric-labels: service={name}
spec:
  type: service
  lifecycle: production
  owner: group:default/oncall
""" for name in SERVICES]
    owner = ("apiVersion: backstage.io/v1alpha1\nkind: Group\nmetadata:\n  name: oncall\n"
             "spec:\n  type: team\n  children: []\n")
    (folder / "catalog-info.yaml").write_text("---\n".join([owner, *docs]))
    return folder


def history(end: int, broke: int | None) -> str:
    """Two hours of each service's 5xx ratio; bookings' steps up at ``broke`` (None: never)."""
    lines = ["# TYPE http_5xx_ratio gauge", "# TYPE latency_p95_ms gauge"]
    for t in range(end - 7200, end + 1, STEP_S):
        bad = broke is not None and t >= broke
        lines += [f'http_5xx_ratio{{service="bookings"}} {0.08 if bad else 0.002} {t}',
                  f'http_5xx_ratio{{service="payments-api"}} 0.003 {t}',
                  f'latency_p95_ms{{service="search-api"}} {200 + (t % 30) / 10} {t}']
    return "\n".join([*lines, "# EOF", ""])


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(params=["sqlite", "postgres"])
def engine_of(request: pytest.FixtureRequest) -> Engine:
    name = "sqlite_engine" if request.param == "sqlite" else "pg_engine"
    engine: Engine = request.getfixturevalue(name)
    return engine


def world(tmp_path: Path, prometheus_server: Callable[..., Prometheus],
          alertmanager_server: Callable[..., Alertmanager], *, broken: bool) -> dict[str, Any]:
    end = int(time.time() // 60 * 60) - 60
    prometheus = prometheus_server([], history=history(end, end - 30 * 60 if broken else None))
    alertmanager = alertmanager_server(NOWHERE, "token", group_wait="1h")
    if broken:
        now = datetime.now(UTC)
        alertmanager.post_alerts([{
            "labels": {"alertname": "BookingsErrors", "service": "bookings",
                       "severity": "critical"},
            "annotations": {"summary": "bookings 5xx above 5%"},
            "startsAt": iso(now - timedelta(minutes=25)),
            "endsAt": iso(now + timedelta(hours=1))}])
    return {"catalog": str(catalog(tmp_path / "catalog")), "approvers": [],
            "prometheus_url": prometheus.base_url, "alertmanager_url": alertmanager.base_url}


def planned(engine: Engine, settings: dict[str, Any], title: str) -> tuple[Any, Any]:
    app = agent_app(engine, **settings)
    case_id = case_at(app, CaseStatus.PLANNING, title)
    planner = AgentPlanner(app, make_agent(app, OfflinePlannerModel()))
    assert ConsumerRunner(engine, planner, max_attempts=1).deliver(
        plan_delivery(app, case_id).envelope) == "done"
    return app, case_id


def test_a_report_naming_no_service_investigates_the_most_anomalous_component(
        engine_of: Engine, tmp_path: Path, prometheus_server: Callable[..., Prometheus],
        alertmanager_server: Callable[..., Alertmanager]) -> None:
    settings = world(tmp_path, prometheus_server, alertmanager_server, broken=True)
    app, case_id = planned(engine_of, settings, "customers complaining, tickets piling up")

    case = app.cases.get_case(case_id)
    assert case["components"] == ["bookings"]
    [note] = [row["reason"] for row in app.cases.timeline(case_id)
              if row["event"] == "agent_update"]
    assert note.startswith("The report names no service; by what is firing and which metrics "
                           "moved, the candidates are bookings (alert BookingsErrors firing; "
                           "http_5xx_ratio 0.002 → 0.08)")
    assert note.endswith("I investigate bookings, the most anomalous.")
    assert "payments-api" not in note and "search-api" not in note  # nothing moved there
    stored = app.cases.proposed_plan(case_id)
    assert case["status"] == CaseStatus.WAIT_GATE and stored is not None
    plan = stored["plan"]
    # the plan rests on bookings' looks: its checks read bookings' 5xx ratio, and it is no
    # region failover picked from a runbook
    assert [c["metric"] for c in plan["verify"]["checks"]] == ['http_5xx_ratio{service="bookings"}']
    assert all(step["action"] != "gateway.flip" for step in plan["steps"])
    findings = [row["reason"] for row in app.cases.timeline(case_id) if row["event"] == "findings"]
    assert findings and "http_5xx_ratio went from 0.2% to 8.0%" in findings[0]


def test_when_nothing_shows_a_symptom_no_unrelated_plan_comes(
        engine_of: Engine, tmp_path: Path, prometheus_server: Callable[..., Prometheus],
        alertmanager_server: Callable[..., Alertmanager]) -> None:
    settings = world(tmp_path, prometheus_server, alertmanager_server, broken=False)
    app, case_id = planned(engine_of, settings, "users in India cannot reach the app")

    case = app.cases.get_case(case_id)
    assert not case.get("components")
    [note] = [row["reason"] for row in app.cases.timeline(case_id)
              if row["event"] == "agent_update"]
    assert note.startswith("The report names no service, and no catalog component has a firing")
    # The planner's plan changes nothing and asks a person to name the service; with Prometheus
    # read, its check cannot select a service's series, so the guard refuses it before the gate:
    # no plan at all (never an unrelated runbook's), the case waits in PLANNING saying why.
    assert app.cases.proposed_plan(case_id) is None
    assert app.cases.get_case(case_id)["status"] == CaseStatus.PLANNING
    [why] = [row["reason"] for row in app.cases.timeline(case_id)
             if row["event"] == "plan_not_proposed"]
    assert why.startswith("I could not propose a plan") and "name its components" in why
