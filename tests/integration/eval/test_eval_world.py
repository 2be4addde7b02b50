"""The evaluation's world (``agent/eval/world.py``) as the agent's looks read it: Debian's
Prometheus answers each scenario's series (written by promtool) as ``series.value_at`` says,
labelled with its service and scenario, and the looks' own readers (``query_metrics``,
``list_alerts``) answer the agent from them; Alertmanager holds its alerts; the recorded
Kubernetes API answers the official client with one revision per deploy; the changes go in as CI
posts them; and a missing peer is one line, not a traceback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.eval import world as eval_world_module
from agent.eval.scenarios import SHIPPED, load_scenario
from agent.eval.series import value_at
from agent.eval.world import WorldError, change_bodies, eval_world
from core.analysis.catalog import MetricSpec
from core.analysis.sources import PrometheusRangeSource
from core.catalog.model import Catalog
from core.changes import ChangeIntake, ChangeStore
from core.db.database import make_engine
from core.domain.promql import QueryBounds
from core.investigate.alerts import AlertsReader
from core.investigate.kubernetes import KubernetesReader
from core.investigate.metrics import MetricsReader
from core.investigate.scope import Target
from core.migrate import upgrade_engine

SCENARIO = load_scenario(SHIPPED / "deploy-regression-checkout.json")
OTHER = load_scenario(SHIPPED / "memory-leak-orders.json")
SCENARIO_ORIGIN = datetime(2026, 11, 27, 14, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def world():
    with eval_world([SCENARIO, OTHER]) as started:
        yield started


def test_prometheus_answers_each_scenarios_series_as_recorded(world):
    """Read through the product's own readers: the analyst's ``query_range`` for the points,
    the agent's ``query_metrics`` for the series' labels."""
    query = 'http_5xx_ratio{service="checkout"}'
    later = world.origin + timedelta(seconds=600)
    target = Target("checkout", "prod", (("app", "checkout"),), (("service", "checkout"),),
                    "checkout")
    read = MetricsReader(world.prometheus_url, QueryBounds()).query(
        target, query, case_started_at=later, now=later)
    assert [series["labels"] for series in read["series"]] == [{
        "__name__": "http_5xx_ratio", "service": "checkout",
        "scenario": "deploy-regression-checkout"}]
    analyst = PrometheusRangeSource(world.prometheus_url, before_s=600, after_s=600, step_s=60,
                                    now=lambda: later)
    points = analyst.read(MetricSpec("http_5xx_ratio", query, "ratio", ()), world.origin)
    shape = SCENARIO.series["http_5xx_ratio"]
    expected = [value_at(SCENARIO.name, "http_5xx_ratio", shape, t, "before")
                for t in range(-600, 601, 60)]
    assert [offset for offset, _ in points] == pytest.approx(range(-600, 601, 60))
    got = [value for _, value in points]
    assert got == pytest.approx(expected, rel=1e-5)
    assert got[0] < 0.01 < got[-1]  # the step at the incident's start is in the data


def test_the_agents_looks_read_the_scenario_through_the_products_own_readers(world):
    """What ``query_metrics`` and ``list_alerts`` answer the agent for the scenario's component
    (its catalog labels), from the real servers."""
    labels = (("service", "checkout"), ("scenario", SCENARIO.name))
    target = Target("checkout", "prod", (("app", "checkout"),), labels, "checkout")
    selector = 'http_5xx_ratio{service="checkout", scenario="deploy-regression-checkout"}'
    read = MetricsReader(world.prometheus_url, QueryBounds()).query(
        target, selector, case_started_at=world.origin + timedelta(seconds=600),
        now=world.origin + timedelta(seconds=600), start=world.origin - timedelta(seconds=600),
        step_s=60)
    [series] = read["series"]
    shape = SCENARIO.series["http_5xx_ratio"]
    assert series["first"] == pytest.approx(value_at(SCENARIO.name, "http_5xx_ratio", shape,
                                                     -600, "before"), rel=1e-3)
    assert series["change"]["at"].startswith(world.origin.strftime("%Y-%m-%dT%H:%M"))
    held = AlertsReader(world.alertmanager_url, timeout_s=5.0).alerts(target)["alerts"]
    assert [(a["labels"]["alertname"], a["state"]) for a in held] == [
        ("CheckoutHighErrorRate", "active")]
    assert held[0]["labels"]["scenario"] == "deploy-regression-checkout"


def test_the_recorded_cluster_has_a_revision_per_deploy_for_the_official_client(world):
    world.serve(SCENARIO)
    reader = KubernetesReader.from_settings(str(world.kubeconfig), None)
    assert reader is not None
    target = Target("checkout", "prod", (("app", "checkout"),), (), "checkout")
    history = reader.rollout_history(target)
    images = [list(revision["images"].values()) for revision in history["revisions"]]
    assert images == [["registry.example.com/checkout:v2.3.0"],
                      ["registry.example.com/checkout:v2.4.0"]]
    logs = reader.logs(target, kube_pod(world), None, 10, 3600)
    assert "PaymentIntentClient" in str(logs)
    world.serve(OTHER)  # the next run's world: checkout is gone, its own service is there
    served = [o["metadata"]["name"] for o in world.kube.world.of_kind("Deployment", None)]
    assert OTHER.service is not None and served == [OTHER.service.name]


def kube_pod(world) -> str:
    pods = [o for o in world.kube.world.objects if o["kind"] == "Pod"]
    return str(pods[0]["metadata"]["name"])


def test_changes_are_recorded_as_ci_posts_them_once(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'changes.sqlite'}")
    upgrade_engine(engine)
    intake = ChangeIntake(ChangeStore(engine), lambda: Catalog.EMPTY)
    for _ in range(2):  # a retried delivery records nothing twice
        for body in change_bodies(SCENARIO, SCENARIO_ORIGIN):
            intake.receive(body, declared="generic")
    recorded = ChangeStore(engine).recent([], ["checkout"], SCENARIO_ORIGIN - timedelta(hours=1),
                                          SCENARIO_ORIGIN)
    assert [(c.kind, c.version, c.happened_at) for c in recorded] == [
        ("deploy", "v2.4.0", SCENARIO_ORIGIN - timedelta(seconds=150))]
    engine.dispose()


def test_a_missing_peer_is_one_line(monkeypatch):
    monkeypatch.setattr(eval_world_module.shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(WorldError) as refused:
        eval_world_module.binary("promtool")
    assert "\n" not in refused.value.message
    assert "apt install prometheus prometheus-alertmanager" in refused.value.message
