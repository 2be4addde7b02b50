"""Where the investigator's looks read, from the settings: Prometheus (``OPSGATE_PROMETHEUS_URL``),
Alertmanager (``OPSGATE_ALERTMANAGER_URL``), the Kubernetes API (``OPSGATE_KUBECONFIG`` or
in-cluster) and the change store; what is not configured stays None and its looks say so."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from core.changes.store import ChangeStore
from core.evidence.configured import promql_bounds
from core.investigate.alerts import AlertsReader
from core.investigate.kubernetes import KubernetesReader
from core.investigate.looks import CaseLooks, Sources
from core.investigate.metrics import MetricsReader

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from core.catalog.model import Catalog
    from core.settings import Settings


def sources_of(settings: Settings, engine: Engine) -> Sources:
    """The sources of ``settings`` (built per agent run: cheap, nothing is connected; the
    Kubernetes reader is one per process), with the change store on ``engine``."""
    metrics = None
    if settings.prometheus_url:
        metrics = MetricsReader(str(settings.prometheus_url), promql_bounds(settings),
                                scope=settings.tenant if settings.promql_scope_label else None)
    alerts = None if not settings.alertmanager_url else \
        AlertsReader(str(settings.alertmanager_url), timeout_s=settings.promql_timeout_s)
    return Sources(metrics=metrics, alerts=alerts, changes=ChangeStore(engine),
                   kubernetes=kubernetes_reader(settings.kubeconfig, settings.kube_context))


def case_looks(case: Mapping[str, Any], catalog: Catalog, settings: Settings,
               engine: Engine) -> CaseLooks:
    """The looks of ``case`` at the sources of ``settings`` (the analyst's, the planner's)."""
    return CaseLooks.of(case, catalog, settings, sources_of(settings, engine))


@lru_cache(maxsize=4)
def kubernetes_reader(kubeconfig: str | None, context: str | None) -> KubernetesReader | None:
    """One reader per cluster and process (its client keeps its connections); None when no
    Kubernetes API is configured. ``InvalidSettings`` when the kubeconfig cannot be used: the
    start of ``opsgate serve``/``consume`` reads it first (``check_sources``)."""
    return KubernetesReader.from_settings(kubeconfig, context)


def sources_line(settings: Settings) -> str:
    """What the investigator's looks can read, in one line: each source, or what is missing."""
    read, missing = _sources(settings)
    line = "the agent's looks read " + (", ".join(read) or "nothing")
    return f"{line}; missing: {', '.join(missing)}" if missing else line


def missing_sources(settings: Settings) -> bool:
    return bool(_sources(settings)[1])


def _sources(settings: Settings) -> tuple[list[str], list[str]]:
    named = [("Prometheus", bool(settings.prometheus_url), "OPSGATE_PROMETHEUS_URL"),
             ("Alertmanager", bool(settings.alertmanager_url), "OPSGATE_ALERTMANAGER_URL"),
             ("Kubernetes", bool(settings.kubeconfig), "OPSGATE_KUBECONFIG"),
             ("recent changes", bool(settings.changes_token), "OPSGATE_CHANGES_TOKEN")]
    return ([name for name, set_, _ in named if set_],
            [f"{name} ({variable})" for name, set_, variable in named if not set_])
