"""The answers of the investigator's read tools for one case: each look resolves the case's scope
(its components, else the operator's default), asks one source, and answers a dict the model
reads; a source that is not configured, or a look outside the scope, is a ``LookRefused`` whose
sentence the model can act on. ``words`` says what a look is doing, for the case's card."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from core.catalog.model import Catalog, Component
from core.investigate.scope import OutOfScope, Scope, Target, default_target, scope_of
from core.investigate.symptoms import by_symptoms, candidates_said
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
)
from core.library.runbooks import words

if TYPE_CHECKING:
    from core.settings import Settings

WINDOW_BEFORE = timedelta(hours=6)


class LookRefused(OutOfScope):
    """A look that cannot be answered: no such source here, or outside the case's scope."""


class MetricReads(Protocol):
    def query(self, target: Target, promql: str, *, case_started_at: datetime, now: datetime,
              start: datetime | None = None, end: datetime | None = None,
              step_s: int | None = None) -> dict[str, Any]: ...

    def list_metrics(self, target: Target, *, case_started_at: datetime, now: datetime,
                     match: str | None = None) -> dict[str, Any]: ...


class AlertReads(Protocol):
    def alerts(self, target: Target) -> dict[str, Any]: ...

    def silences(self, target: Target) -> dict[str, Any]: ...


class KubeReads(Protocol):
    def objects(self, target: Target, kind: str) -> Any: ...

    def events(self, target: Target, since: datetime) -> Any: ...

    def logs(self, target: Target, pod: str, container: str | None = None, lines: int = 100,
             since_s: int = 3600) -> Any: ...

    def rollout_history(self, target: Target, deployment: str | None = None) -> Any: ...


class ChangeReads(Protocol):
    def recent(self, components: list[str], services: list[str], since: datetime,
               until: datetime, limit: int = 20) -> list[Any]: ...

    def last_before(self, components: list[str], services: list[str],
                    at: datetime) -> Any | None: ...


@dataclass(frozen=True)
class Sources:
    """What the looks read; None: not configured here (the look says so)."""

    metrics: MetricReads | None = None
    alerts: AlertReads | None = None
    kubernetes: KubeReads | None = None
    changes: ChangeReads | None = None


NOT_CONFIGURED = {
    "metrics": "no Prometheus is configured (OPSGATE_PROMETHEUS_URL); no metric can be read",
    "alerts": "no Alertmanager is configured (OPSGATE_ALERTMANAGER_URL); no alert can be read",
    "kubernetes": "no Kubernetes API is configured (OPSGATE_KUBECONFIG, or running in a "
                  "cluster); no object, event or log can be read",
    "changes": "no change store is available; no change can be read",
}


@dataclass(frozen=True)
class CaseLooks:
    """The looks of one case: its scope, when it opened, and the sources."""

    scope: Scope
    opened_at: datetime
    sources: Sources
    catalog: Catalog = Catalog.EMPTY
    now: Callable[[], datetime] = lambda: datetime.now(UTC)

    @classmethod
    def of(cls, case: Mapping[str, Any], catalog: Catalog, settings: Settings,
           sources: Sources) -> CaseLooks:
        default = default_target(settings.default_namespace, settings.default_selector,
                                 settings.default_metric_labels)
        scope = scope_of(catalog, case.get("components") or (), default)
        return cls(scope, _instant(str(case["created_at"])), sources, catalog)

    @property
    def catalog_known(self) -> bool:
        """Whether this installation has a catalog (without one, templates stay as written)."""
        return bool(self.catalog.components)

    # -- the looks --------------------------------------------------------------------------

    def find_components(self, args: FindArgs) -> dict[str, Any]:
        if not self.catalog_known:
            raise LookRefused("there is no service catalog here (OPSGATE_CATALOG)")
        found = find_components(self.catalog, args.query)
        answer: dict[str, Any] = {"components": [_component(c) for c in found],
                                  "named": list(self.scope.names())}
        if not found:  # the report names no component: which ones show symptoms now
            candidates = by_symptoms(self.catalog, self.sources.metrics, self.sources.alerts,
                                     self.opened_at, self.now())
            answer |= {"by_symptoms": [c.answer() for c in candidates],
                       "said": candidates_said(candidates)}
        return answer

    def query_metrics(self, args: MetricsQueryArgs) -> dict[str, Any]:
        target = self.scope.metrics(args.component)
        start = None if args.start is None else _when(args.start, "start")
        end = None if args.end is None else _when(args.end, "end")
        return self._metrics().query(target, args.query, case_started_at=self.opened_at,
                                     now=self.now(), start=start, end=end, step_s=args.step_s)

    def list_metrics(self, args: MetricsListArgs) -> dict[str, Any]:
        target = self.scope.metrics(args.component)
        return self._metrics().list_metrics(target, case_started_at=self.opened_at,
                                            now=self.now(), match=args.match)

    def list_alerts(self, args: LookArgs) -> dict[str, Any]:
        target = self.scope.metrics(args.component)
        alerts = self._source("alerts")
        return {"component": target.name, **_as_dict(alerts.alerts(target), "alerts"),
                **_as_dict(alerts.silences(target), "silences")}

    def kube_objects(self, args: ObjectsArgs) -> dict[str, Any]:
        target = self.scope.kubernetes(args.component)
        found = self._kube().objects(target, args.kind)
        return {"component": target.name, "namespace": target.namespace,
                **_as_dict(found, args.kind)}

    def kube_events(self, args: EventsArgs) -> dict[str, Any]:
        target = self.scope.kubernetes(args.component)
        since = self.now() - timedelta(minutes=args.since_minutes)
        return {"component": target.name, **_as_dict(self._kube().events(target, since),
                                                      "events")}

    def pod_logs(self, args: LogsArgs) -> dict[str, Any]:
        target = self.scope.kubernetes(args.component)
        text = self._kube().logs(target, args.pod, args.container, args.lines,
                                 args.since_minutes * 60)
        return {"component": target.name, "pod": args.pod, **_as_dict(text, "log")}

    def rollout_history(self, args: HistoryArgs) -> dict[str, Any]:
        target = self.scope.kubernetes(args.component)
        history = self._kube().rollout_history(target, args.deployment)
        return {"component": target.name, **_as_dict(history, "revisions")}

    def recent_changes(self, args: ChangesArgs) -> dict[str, Any]:
        target = self.scope.target(args.component)
        now = self.now()
        changes = self._source("changes").recent(
            [target.name], [name for name in (target.workload,) if name], now -
            timedelta(hours=args.hours), now)
        answer: dict[str, Any] = {"component": target.name,
                                  "changes": [_change(change) for change in changes]}
        if self.sources.kubernetes is not None and target.namespace is not None:
            answer["rollout_history"] = self.sources.kubernetes.rollout_history(target, None)
        return answer

    # -- plumbing ---------------------------------------------------------------------------

    def _metrics(self) -> MetricReads:
        reads: MetricReads = self._source("metrics")
        return reads

    def _kube(self) -> KubeReads:
        reads: KubeReads = self._source("kubernetes")
        return reads

    def _source(self, name: str) -> Any:
        source = getattr(self.sources, name)
        if source is None:
            raise LookRefused(NOT_CONFIGURED[name])
        return source


def find_components(catalog: Catalog, query: str, limit: int = 5) -> list[Component]:
    """The components sharing the most words with ``query`` (its name, Kubernetes id, title,
    system and description; a name or id word counts double), best first."""
    asked = words(query)

    def score(component: Component) -> int:
        named = words(f"{component.name} {component.workload}")
        said = words(" ".join(filter(None, (component.title, component.system,
                                            component.description))))
        return 2 * len(asked & named) + len(asked & said)

    ranked = sorted(catalog.components.values(), key=lambda c: (-score(c), c.name))
    return [c for c in ranked if score(c) > 0][:limit]


def _component(component: Component) -> dict[str, Any]:
    fields = {"name": component.name, "title": component.title, "owner": component.owner,
              "lifecycle": component.lifecycle, "system": component.system,
              "namespace": component.kubernetes_namespace,
              "description": component.description,
              "remedy": {f"opsgate.dev/{key}": value for key, value in component.remedy}}
    return {name: value for name, value in fields.items() if value}


def _as_dict(answer: Any, key: str) -> dict[str, Any]:
    """A reader's answer as fields of the look's answer: a dict as it is, else under ``key``."""
    return dict(answer) if isinstance(answer, Mapping) else {key: answer}


def _change(change: Any) -> dict[str, Any]:
    fields = ("change_id", "kind", "service", "component", "version", "summary", "actor",
              "happened_at", "source", "url", "target", "before", "after")
    return {name: _plain(getattr(change, name, None)) for name in fields
            if getattr(change, name, None) is not None}


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _when(text: str, name: str) -> datetime:
    try:
        return _instant(text.replace("Z", "+00:00"))
    except ValueError:
        raise LookRefused(f"{name} {text!r} is not an ISO 8601 time such as "
                          "2026-11-27T14:02:00Z") from None
