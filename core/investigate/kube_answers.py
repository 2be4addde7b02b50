"""Kubernetes objects (the official client's models) as the investigator's compact answers: a pod's
phase, readiness, restarts and last termination; a deployment's replicas and conditions in
words; a ReplicaSet's revision and images; an HPA's bounds and current metrics. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the models load with the answers they describe (see kubernetes.py)
    from kubernetes.client import (
        CoreV1Event,
        V1Deployment,
        V1ObjectMeta,
        V1Pod,
        V1PodTemplateSpec,
        V1ReplicaSet,
        V2HorizontalPodAutoscaler,
        V2MetricSpec,
        V2MetricStatus,
        V2MetricTarget,
        V2MetricValueStatus,
    )

REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
TEXT_CHARS = 500
"""The longest text (a log line, an event's message) an answer carries whole."""


def when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def cut(text: str, limit: int = TEXT_CHARS) -> str:
    """``text`` within ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters cut)"


def labels_match(labels: Mapping[str, str] | None, wanted: Sequence[tuple[str, str]]) -> bool:
    found = labels or {}
    return all(found.get(key) == value for key, value in wanted)


def meta_of(found: Any) -> V1ObjectMeta:
    from kubernetes.client import V1ObjectMeta

    meta: V1ObjectMeta | None = found.metadata
    return meta if meta is not None else V1ObjectMeta()


def revision_of(meta: V1ObjectMeta) -> int | None:
    try:
        return int((meta.annotations or {})[REVISION])
    except (KeyError, ValueError):
        return None


def images_of(template: V1PodTemplateSpec | None) -> dict[str, str]:
    """Container → image of a pod template (init containers are not the service)."""
    if template is None or template.spec is None:
        return {}
    return {c.name: c.image or "" for c in template.spec.containers}


# -- pods -----------------------------------------------------------------------------------------

def pod_answer(pod: V1Pod) -> dict[str, Any]:
    meta, status = meta_of(pod), pod.status
    containers = pod.spec.containers if pod.spec is not None else []
    statuses = (status.container_statuses if status is not None else None) or []
    answer: dict[str, Any] = {
        "name": meta.name, "phase": status.phase if status is not None else None,
        "ready": f"{sum(s.ready for s in statuses)}/{len(containers)}",
        "restarts": sum(s.restart_count for s in statuses),
        "images": {c.name: c.image for c in containers},
        "started": when(status.start_time if status is not None else None),
    }
    waiting = {s.name: s.state.waiting.reason for s in statuses
               if s.state is not None and s.state.waiting is not None}
    if waiting:
        answer["waiting"] = waiting
    ended = {s.name: _termination(s.last_state.terminated) for s in statuses
             if s.last_state is not None and s.last_state.terminated is not None}
    if ended:
        answer["last_termination"] = ended
    return answer


def _termination(ended: Any) -> str:
    """``OOMKilled (exit 137) at 2026-…Z``."""
    at = when(ended.finished_at)
    return f"{ended.reason or 'terminated'} (exit {ended.exit_code})" + (f" at {at}" if at else "")


def troubled_first(pod: Mapping[str, Any]) -> tuple[bool, int, str]:
    """Sort key: pods not ready or restarting before the healthy ones, then by name."""
    ready, total = str(pod["ready"]).split("/")
    return ready == total and not pod["restarts"], -int(pod["restarts"]), str(pod["name"])


# -- deployments and replicasets ------------------------------------------------------------------

def deployment_answer(deployment: V1Deployment) -> dict[str, Any]:
    meta, spec, status = meta_of(deployment), deployment.spec, deployment.status
    annotations = meta.annotations or {}
    answer: dict[str, Any] = {
        "name": meta.name,
        "replicas": {"desired": spec.replicas if spec is not None else None,
                     "updated": (status.updated_replicas or 0) if status else 0,
                     "ready": (status.ready_replicas or 0) if status else 0,
                     "available": (status.available_replicas or 0) if status else 0},
        "images": images_of(spec.template if spec is not None else None),
        "conditions": [_condition(c) for c in (status.conditions or [] if status else [])],
        "revision": revision_of(meta),
    }
    if CHANGE_CAUSE in annotations:
        answer["change_cause"] = cut(annotations[CHANGE_CAUSE])
    mounted = configmaps_of(spec.template.spec if spec is not None and spec.template else None)
    if mounted:
        answer["configmaps"] = mounted
    return answer


def configmaps_of(pod_spec: Any) -> list[str]:
    """The ConfigMaps a pod template reads: its volumes, ``envFrom`` and ``env`` references."""
    if pod_spec is None:
        return []
    found = {v.config_map.name for v in pod_spec.volumes or [] if v.config_map is not None}
    for container in pod_spec.containers or []:
        found |= {e.config_map_ref.name for e in container.env_from or [] if e.config_map_ref}
        found |= {e.value_from.config_map_key_ref.name for e in container.env or []
                  if e.value_from is not None and e.value_from.config_map_key_ref is not None}
    return sorted(name for name in found if name)


def _condition(condition: Any) -> str:
    """``Available is False (MinimumReplicasUnavailable): Deployment does not have…``."""
    words = f"{condition.type} is {condition.status}"
    if condition.reason:
        words += f" ({condition.reason})"
    return words + (f": {cut(condition.message)}" if condition.message else "")


def replica_set_answer(replica_set: V1ReplicaSet) -> dict[str, Any]:
    meta, spec, status = meta_of(replica_set), replica_set.spec, replica_set.status
    owners = [o.name for o in meta.owner_references or [] if o.kind == "Deployment"]
    return {"name": meta.name, "revision": revision_of(meta),
            "images": images_of(spec.template if spec is not None else None),
            "replicas": {"desired": spec.replicas if spec is not None else None,
                         "ready": (status.ready_replicas or 0) if status else 0},
            "created": when(meta.creation_timestamp),
            "deployment": owners[0] if owners else None}


def revision_answer(replica_set: V1ReplicaSet, current: int | None) -> dict[str, Any]:
    """One revision of a rollout history (``core/investigate/templates.revisions_of`` reads
    these fields)."""
    meta, spec = meta_of(replica_set), replica_set.spec
    revision = revision_of(meta)
    cause = (meta.annotations or {}).get(CHANGE_CAUSE)
    return {"revision": revision, "replicaset": meta.name,
            "images": images_of(spec.template if spec is not None else None),
            "created": when(meta.creation_timestamp),
            "change_cause": None if cause is None else cut(cause),
            "replicas": spec.replicas if spec is not None else None,
            "current": revision is not None and revision == current}


# -- HPAs -----------------------------------------------------------------------------------------

def hpa_answer(hpa: V2HorizontalPodAutoscaler) -> dict[str, Any]:
    meta, spec, status = meta_of(hpa), hpa.spec, hpa.status
    targets = {_metric_name(m): m for m in (spec.metrics or [] if spec is not None else [])}
    current = status.current_metrics or [] if status is not None else []
    ref = spec.scale_target_ref if spec is not None else None
    return {"name": meta.name, "scales": f"{ref.kind}/{ref.name}" if ref is not None else None,
            "min": spec.min_replicas if spec is not None else None,
            "max": spec.max_replicas if spec is not None else None,
            "current": status.current_replicas if status is not None else None,
            "desired": status.desired_replicas if status is not None else None,
            "metrics": [_metric_words(m, targets.get(_metric_name(m))) for m in current]}


def _metric_name(metric: V2MetricSpec | V2MetricStatus) -> str:
    for source in (metric.resource, metric.container_resource):
        if source is not None:
            container = getattr(source, "container", None)
            return f"{container} {source.name}" if container else source.name
    for named in (metric.pods, metric.object, metric.external):
        if named is not None:
            return str(named.metric.name)
    return metric.type


def _metric_words(metric: V2MetricStatus, target: V2MetricSpec | None) -> str:
    """``cpu 92% (target 70%)``, ``requests_per_second 120 (target 100)``."""
    source = metric.resource or metric.container_resource or metric.pods or metric.object \
        or metric.external
    words = f"{_metric_name(metric)} {_value(source.current) if source is not None else '?'}"
    aim = _target_of(target)
    return words + (f" (target {_value(aim)})" if aim is not None else "")


def _target_of(spec: V2MetricSpec | None) -> V2MetricTarget | None:
    if spec is None:
        return None
    source = spec.resource or spec.container_resource or spec.pods or spec.object or spec.external
    return None if source is None else source.target


def _value(value: V2MetricValueStatus | V2MetricTarget) -> str:
    if value.average_utilization is not None:
        return f"{value.average_utilization}%"
    return str(value.average_value or value.value or "?")


# -- events ---------------------------------------------------------------------------------------

def event_time(event: CoreV1Event) -> datetime | None:
    """When it last happened: its last time, else its event time, first time, creation."""
    series = event.series.last_observed_time if event.series is not None else None
    return (event.last_timestamp or series or event.event_time or event.first_timestamp
            or meta_of(event).creation_timestamp)


def event_answer(event: CoreV1Event) -> dict[str, Any]:
    involved = event.involved_object
    return {"type": event.type, "reason": event.reason,
            "object": f"{involved.kind}/{involved.name}",
            "message": cut(event.message or ""), "count": event.count or 1,
            "last": when(event_time(event))}
