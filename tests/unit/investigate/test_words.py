"""What a look is doing, in the one line the case's card keeps current ("querying http_5xx_ratio
for payments-api, 13:30 to 14:30"), and a recorded change as the card shows it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from core.catalog.model import Catalog, Component
from core.changes.model import Change
from core.investigate.looks import CaseLooks, Sources
from core.investigate.scope import scope_of
from core.investigate.tools import (
    ChangesArgs,
    EventsArgs,
    FindArgs,
    HistoryArgs,
    LogsArgs,
    LookArgs,
    MetricsListArgs,
    MetricsQueryArgs,
    ObjectsArgs,
    TemplateArgs,
)
from core.investigate.words import change_line, look_words

NOW = datetime(2026, 11, 27, 14, 45, tzinfo=UTC)


def component(name: str) -> Component:
    return Component(name=name, owner="payments-oncall", lifecycle="production", system=None,
                     title=None, kubernetes_id=None, kubernetes_namespace="payments",
                     kubernetes_selector=(), links=(), source="catalog-info.yaml")


CATALOG = Catalog.of([component("payments-api"), component("checkout")], [], [])


def looks(*components: str) -> CaseLooks:
    return CaseLooks(scope_of(CATALOG, components, None), datetime(2026, 11, 27, 14, 10,
                                                                   tzinfo=UTC),
                     Sources(), CATALOG, now=lambda: NOW)


ONE = looks("payments-api")


def query(promql: str, **window: Any) -> str:
    return look_words("query_metrics", MetricsQueryArgs(query=promql, **window), ONE)


# -- each look, for the component named or the case's ------------------------------------------


@pytest.mark.parametrize(("tool", "args", "words"), [
    ("find_components", FindArgs(query="checkout is slow"),
     "looking the service up in the catalog"),
    ("list_metrics", MetricsListArgs(), "listing the metrics of payments-api"),
    ("list_alerts", LookArgs(), "reading the alerts of payments-api"),
    ("kube_objects", ObjectsArgs(), "reading the pods of payments-api"),
    ("kube_objects", ObjectsArgs(kind="hpas"), "reading the hpas of payments-api"),
    ("kube_events", EventsArgs(), "reading the Kubernetes events of payments-api"),
    ("pod_logs", LogsArgs(pod="payments-api-7d9f-x2"),
     "reading the logs of pod payments-api-7d9f-x2"),
    ("rollout_history", HistoryArgs(), "reading the rollout history of payments-api"),
    ("recent_changes", ChangesArgs(), "reading what changed in payments-api"),
    ("plan_template", TemplateArgs(template="k8s.rollout.canary"),
     "filling in the plan k8s.rollout.canary for payments-api"),
    ("query_metrics", MetricsQueryArgs(query="up"), "querying up for payments-api"),
    ("get_timeline", LookArgs(), "get_timeline for payments-api"),
])
def test_each_look_says_what_it_looks_at(tool: str, args: Any, words: str) -> None:
    assert look_words(tool, args, ONE) == words


def test_a_named_component_is_the_one_said() -> None:
    words = look_words("list_alerts", LookArgs(component="checkout"),
                       looks("payments-api", "checkout"))

    assert words == "reading the alerts of checkout"


def test_without_a_named_component_the_case_s_components_are_said() -> None:
    assert look_words("kube_events", EventsArgs(), looks("payments-api", "checkout")) == \
        "reading the Kubernetes events of payments-api, checkout"
    assert look_words("recent_changes", ChangesArgs(), looks()) == \
        "reading what changed in the case"


# -- the metric a query reads ------------------------------------------------------------------

@pytest.mark.parametrize(("promql", "metric"), [
    ("http_5xx_ratio", "http_5xx_ratio"),
    ('http_5xx_ratio{service="payments-api"}', "http_5xx_ratio"),
    ('sum(rate(http_requests_total{service="payments-api",code=~"5.."}[5m]))',
     "http_requests_total"),
    ("sum by (service, code) (rate(http_requests_total[5m]))", "http_requests_total"),
    ("sum(rate(http_requests_total[5m])) by (le)", "http_requests_total"),
    ("histogram_quantile(0.95, sum by (le) (rate(http_request_duration_seconds_bucket"
     '{service="payments-api"}[5m])))', "http_request_duration_seconds_bucket"),
    ("max without (instance) (process_resident_memory_bytes)", "process_resident_memory_bytes"),
    ("errors_total / on (instance) group_left requests_total", "errors_total"),
    ("increase(kube_pod_container_status_restarts_total[1h]) > 3",
     "kube_pod_container_status_restarts_total"),
    ("node:cpu_utilisation:avg1m", "node:cpu_utilisation:avg1m"),
    ('{__name__="http_5xx_ratio"}', "a query"),
    ("sum(rate(())", "a query"),
    ('rate({service="payments-api"}[5m])', "a query"),  # a range's unit is no metric
    ("1e3 < http_5xx_ratio", "http_5xx_ratio"),  # nor a number's exponent
])
def test_the_metric_said_is_the_first_the_query_reads(promql: str, metric: str) -> None:
    assert query(promql) == f"querying {metric} for payments-api"


# -- the window -----------------------------------------------------------------------------------


def test_a_range_query_says_its_window_in_hours_and_minutes() -> None:
    words = query("http_5xx_ratio", start="2026-11-27T13:30:00Z", end="2026-11-27T14:30:00Z")

    assert words == "querying http_5xx_ratio for payments-api, 13:30 to 14:30"


def test_a_window_without_an_end_runs_to_now() -> None:
    words = query("http_5xx_ratio", start="2026-11-27T13:30:00+00:00")

    assert words == "querying http_5xx_ratio for payments-api, 13:30 to 14:45"


def test_a_window_longer_than_a_day_says_the_days() -> None:
    words = query("up", start="2026-11-25T13:30:00Z", end="2026-11-27T14:30:00Z")

    assert words == "querying up for payments-api, 25 Nov 13:30 to 27 Nov 14:30"


def test_a_window_that_is_no_time_is_left_out() -> None:
    assert query("up", start="an hour ago") == "querying up for payments-api"
    assert query("up", start="2026-11-27T13:30:00Z", end="now") == "querying up for payments-api"


# -- a change as the card shows it ---------------------------------------------------------------


def change(**fields: Any) -> Change:
    at = datetime(2026, 11, 27, 14, 2, 41, tzinfo=UTC)
    recorded: dict[str, Any] = {
        "change_id": "ci-4711", "source": "generic", "kind": "deploy", "service": "payments",
        "component": "payments-api", "namespace": "payments", "version": "v2.4.0",
        "summary": "deploy v2.4.0", "actor": "ci", "url": None, "happened_at": at,
        "received_at": at, "fingerprint": "f"}
    return Change(**{**recorded, **fields})


def test_a_deploy_reads_when_what_version_and_who() -> None:
    assert change_line(change()) == "14:02 payments-api v2.4.0 by ci"


def test_a_change_of_no_known_component_is_named_as_sent() -> None:
    assert change_line(change(component=None)) == "14:02 payments v2.4.0 by ci"


def test_a_configuration_change_says_so_and_an_empty_version_is_left_out() -> None:
    line = change_line(change(kind="config", version="", actor="argocd"))

    assert line == "14:02 payments-api (config) by argocd"


def test_a_change_read_back_as_json_shows_its_time_as_written() -> None:
    class Answered:  # a change as recent_changes answers it: happened_at in ISO 8601
        happened_at = "2026-11-27T14:02:41+00:00"
        component, service, version, kind, actor = "checkout", "checkout", "v41", "deploy", "gh"

    assert change_line(Answered()) == "2026-11-27T14:02:41+00:00 checkout v41 by gh"
