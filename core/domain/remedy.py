"""The remedy: the inverse of what caused the incident, on the object that changed. Pure — from
what the evidence found (``Cause``), the change record suspected of it (its ``target``,
``before`` and ``after``), the component's Deployment and its ``opsgate.dev/*`` annotations, it
writes the plan's steps:

- a deploy → a rollback to the named revision before it (made from the rollout history by the
  ``k8s.rollout.canary`` template, never "the previous one"; without a history: nothing
  automatic);
- a ConfigMap change → ``k8s.configmap`` back to its ``before`` data, then a restart of the
  Deployment that mounts it; no ``before`` recorded → a ``noop`` naming what to restore;
- a flag change → ``flag.set`` back to ``before`` on the component's OpenFeature
  ``FeatureFlag`` (annotation ``opsgate.dev/flags``); none → a ``noop`` asking a person;
- saturation → ``k8s.scale``, at most ``opsgate.dev/max-replicas``;
- a regional fault → ``gateway.flip`` of the component's route (``opsgate.dev/route``, else its
  name) from its serving region to the next (``opsgate.dev/regions: fra1,ams3``);
- a leak or a stuck process → a restart (the ``script.restart`` template); nothing anomalous →
  no change.

A remedy that cannot be written says so in one sentence, in a ``noop`` that asks a person."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Cause = Literal["deploy", "config", "flag", "saturation", "regional", "stuck", "none"]
TEMPLATES: Mapping[Cause, str] = {"deploy": "k8s.rollout.canary", "stuck": "script.restart"}
"""The causes whose plan a template makes for the component (``plan_template``)."""
TITLE_LENGTH = 200
UNCHECKED = ({"metric": "http_5xx_ratio", "below": 0.01, "for_s": 60},)
"""The templates' check, for a remedy written without the evidence's own checks."""


@dataclass(frozen=True)
class Workload:
    """The component's Deployment as the looks showed it: where, how many replicas, and the
    ConfigMaps it mounts (None: not known)."""

    namespace: str
    deployment: str
    replicas: int
    configmaps: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Remedy:
    """What the remedy is: a plan written here, or the template that makes it (``template``)."""

    cause: Cause
    plan: dict[str, Any] | None = None
    template: str | None = None


def cause_of(action: str, change: Mapping[str, Any] | None) -> Cause:
    """The cause the evidence's decision (``rollback``, ``scale``…) names, read with the change
    it suspects: what kind of object the change changed."""
    if action == "rollback":
        target = str((change or {}).get("target") or "")
        if target.startswith("flag/"):
            return "flag"
        if target.startswith("configmap/") or (change or {}).get("kind") == "config":
            return "config"
        return "deploy"
    return {"scale": "saturation", "failover": "regional", "restart": "stuck"}.get(
        action, "none")  # type: ignore[return-value]


def remedy(cause: Cause, change: Mapping[str, Any] | None, workload: Workload | None,
           annotations: Mapping[str, str],
           checks: Sequence[Mapping[str, Any]] = UNCHECKED, *,
           replicas: int | None = None) -> Remedy:
    """The remedy of ``cause`` (see the module docstring) checked by ``checks``;
    ``annotations`` are the component's ``opsgate.dev/*`` ones, keyed without the prefix;
    ``replicas`` the count a person asked a scale-out for (still bounded by the annotation)."""
    made = _remedy(cause, change, workload, annotations, replicas)
    if made.plan is not None:
        made.plan["verify"] = {"checks": [dict(check) for check in checks or UNCHECKED]}
    return made


def _remedy(cause: Cause, change: Mapping[str, Any] | None, workload: Workload | None,
            annotations: Mapping[str, str], replicas: int | None) -> Remedy:
    if cause in TEMPLATES:
        return Remedy(cause, template=TEMPLATES[cause])
    if cause == "none":
        return Remedy(cause, _ask("No change: nothing is anomalous now", "nothing to change"))
    if workload is None:
        return Remedy(cause, _ask("No automatic change: the component's Deployment was not "
                                  "found in the cluster", "find the component's Deployment"))
    if cause == "config":
        return Remedy(cause, _config(change or {}, workload))
    if cause == "flag":
        return Remedy(cause, _flag(change or {}, workload, annotations.get("flags")))
    if cause == "saturation":
        return Remedy(cause, _scale(workload, annotations.get("max-replicas"), replicas))
    return Remedy(cause, _failover(workload, annotations))


def _config(change: Mapping[str, Any], w: Workload) -> dict[str, Any]:
    target = str(change.get("target") or "")
    name = target.removeprefix("configmap/") if target.startswith("configmap/") else None
    before = change.get("before")
    if name is None:
        return _ask(f"No automatic revert: the config change of {change.get('service')} names "
                    "no ConfigMap; a person must set it back",
                    "restore the configuration changed before the incident by hand")
    where = f"{w.namespace}/{name}"
    if not _string_map(before):
        return _ask(f"No automatic revert: no data of ConfigMap {where} before the change was "
                    "recorded; a person must set it back",
                    f"restore ConfigMap {where} to its data before the change")
    mounting = [w.deployment] if w.configmaps is None or name in w.configmaps else []
    if not mounting:
        return _ask(f"No automatic revert: deployment {w.namespace}/{w.deployment} does not "
                    f"mount ConfigMap {where}", f"restore ConfigMap {where} and restart what "
                    "mounts it")
    after = change.get("after")
    undo = ([_step("k8s.configmap", {"namespace": w.namespace, "name": name, "data": after})]
            if _string_map(after) else [])
    return {"title": _title(f"Set ConfigMap {where} back to its data before the change and "
                            f"restart deployment {w.namespace}/{w.deployment}"),
            "risk_score": 0.3,
            "steps": [_step("k8s.configmap", {"namespace": w.namespace, "name": name,
                                              "data": before}),
                      *[_restart(w.namespace, d) for d in mounting]],
            "rollback": {"steps": undo}}


def _flag(change: Mapping[str, Any], w: Workload, resource: str | None) -> dict[str, Any]:
    key = str(change.get("target") or "").removeprefix("flag/")
    before = change.get("before")
    value = dict(before) if isinstance(before, Mapping) else \
        {"defaultVariant": before} if isinstance(before, str) else None
    if resource is None:
        return _ask(f"No automatic revert: {change.get('service')} names no FeatureFlag "
                    "resource (annotation opsgate.dev/flags); a person must set flag "
                    f"{key} back", f"set flag {key} back to its value before the change")
    if not value:
        return _ask(f"No automatic revert: no value of flag {key} before the change was "
                    "recorded; a person must set it back",
                    f"set flag {key} back to its value before the change")
    after = change.get("after")
    forward = dict(after) if isinstance(after, Mapping) else \
        {"defaultVariant": after} if isinstance(after, str) else None
    params = {"namespace": w.namespace, "name": resource, "flag": key}
    return {"title": _title(f"Set flag {key} of {w.namespace}/{resource} back to its value "
                            "before the change"),
            "risk_score": 0.2,
            "steps": [_step("flag.set", {**params, "value": value})],
            "rollback": {"steps": [_step("flag.set", {**params, "value": forward})]
                         if forward else []}}


def _scale(w: Workload, most: str | None, asked: int | None) -> dict[str, Any]:
    bound = int(most) if most and most.isdigit() else None
    wanted = asked or max(w.replicas * 2, w.replicas + 1)
    replicas = min(wanted, bound) if bound is not None else wanted
    where = f"{w.namespace}/{w.deployment}"
    if replicas <= w.replicas:
        return _ask(f"No automatic change: deployment {where} already runs {w.replicas} "
                    f"replicas, its most (opsgate.dev/max-replicas {bound})",
                    f"add capacity to {where} beyond its {bound} replicas")
    params = {"namespace": w.namespace, "deployment": w.deployment}
    bounded = ", its most" if replicas == bound else ""
    return {"title": _title(f"Scale deployment {where} from {w.replicas} to {replicas} "
                            f"replicas{bounded}"),
            "risk_score": 0.3,
            "steps": [_step("k8s.scale", {**params, "replicas": replicas})],
            "rollback": {"steps": [_step("k8s.scale", {**params, "replicas": w.replicas})]}}


def _failover(w: Workload, annotations: Mapping[str, str]) -> dict[str, Any]:
    regions = [r.strip() for r in (annotations.get("regions") or "").split(",") if r.strip()]
    route = annotations.get("route") or w.deployment
    if len(regions) < 2:
        return _ask("No automatic failover: the catalog names no second region for "
                    f"{w.deployment} (annotation opsgate.dev/regions)",
                    f"move {w.deployment}'s traffic to a healthy region")
    serving, standby = regions[0], regions[1]
    return {"title": _title(f"Move route {route}'s traffic from {serving} to {standby}"),
            "risk_score": 0.6,
            "steps": [_step("gateway.flip", {"route": route, "from": serving, "to": standby})],
            "rollback": {"steps": [_step("gateway.flip", {"route": route, "from": standby,
                                                          "to": serving})]}}


def _ask(title: str, what: str) -> dict[str, Any]:
    """A plan that changes nothing and names what a person should do."""
    return {"title": _title(title), "risk_score": 0.0,
            "steps": [_step("noop", {"note": f"a person must {what}"[:1000]})],
            "rollback": {"steps": []}}


def _restart(namespace: str, deployment: str) -> dict[str, Any]:
    return _step("k8s.rollout", {"operation": "restart", "namespace": namespace,
                                 "deployment": deployment})


def _step(action: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"action": action, "params": dict(params), "timeout_s": 600 if action.startswith(
        "k8s.rollout") else 120, "retry": 1}


def _string_map(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _title(text: str) -> str:
    return text if len(text) <= TITLE_LENGTH else f"{text[:TITLE_LENGTH - 1]}…"


def annotations_of(found: Sequence[Mapping[str, Any]], component: str | None) -> dict[str, str]:
    """The ``opsgate.dev/*`` remedy annotations of ``component`` in a ``find_components``
    answer's components, keyed without the prefix."""
    for entry in found:
        if component is None or entry.get("name") == component:
            remedy = entry.get("remedy")
            if isinstance(remedy, Mapping):
                return {str(k).removeprefix("opsgate.dev/"): str(v) for k, v in remedy.items()}
    return {}
