"""Plan templates made for the case's component: the namespace, deployment and container from the
catalog and Kubernetes, and a rollback to the revision before the component's last change — not
``prod/app``. A template that cannot be made for the component (no component, no deployment, no
revision to return to) is refused with the reason. An installation without a catalog gets the
template as the operator wrote it (seed 004's ``/plan/generate`` walkthrough)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.domain.plan_templates import load_template, template_names
from core.investigate.looks import LookRefused
from core.investigate.scope import Target

if TYPE_CHECKING:
    from core.investigate.looks import CaseLooks


@dataclass(frozen=True)
class Revision:
    """One revision of a deployment as its rollout history tells it."""

    number: int
    images: Mapping[str, str]  # container → image
    created: str | None
    cause: str | None
    current: bool


def plan_for_case(looks: CaseLooks, template: str, component: str | None) -> dict[str, Any]:
    """The template ``template`` made for ``component`` of the case (its only one when None):
    ``{"plan": …, "made_for": …}``; ``LookRefused`` saying why it cannot be made."""
    if template not in template_names():
        raise LookRefused(f"there is no plan template {template!r}; there are "
                          f"{', '.join(template_names())}")
    plan = load_template(template)
    if not looks.catalog_known:
        return {"plan": plan, "made_for": "no catalog: the template as the operator wrote it"}
    actions = {step["action"] for step in plan["steps"]}
    if actions <= {"noop"}:  # changes nothing: made for whatever the case concerns
        return {"plan": plan, "made_for": ", ".join(looks.scope.names()) or "the case"}
    target = looks.scope.target(component)
    if "k8s.rollout" in actions:
        return _rollback(looks, plan, target)
    if "script.exec" in actions and template.startswith("script.restart"):
        return _restart(plan, _deployment_of(target))
    return {"plan": plan, "made_for": target.name}


def _deployment_of(target: Target) -> Target:
    if target.namespace is None or target.workload is None:
        raise LookRefused(f"{target.name} has no Kubernetes deployment in the catalog "
                          "(annotations backstage.io/kubernetes-namespace and "
                          "backstage.io/kubernetes-id); this template cannot be made for it")
    return target


def _restart(plan: dict[str, Any], target: Target) -> dict[str, Any]:
    made = copy.deepcopy(plan)
    made["title"] = f"Restart {target.name} (deployment {target.namespace}/{target.workload})"
    made["steps"] = [{"action": "k8s.rollout", "timeout_s": 600, "retry": 1,
                      "params": _rollout(target, "restart")}]
    return {"plan": made, "made_for": target.name}


def _rollback(looks: CaseLooks, plan: dict[str, Any], target: Target) -> dict[str, Any]:
    target = _deployment_of(target)
    kubernetes = looks.sources.kubernetes
    if kubernetes is None:
        raise LookRefused(f"no Kubernetes API is configured, so the revision {target.name} "
                          "ran before its last change is unknown; a rollback cannot be made")
    revisions = revisions_of(kubernetes.rollout_history(target, None))
    current = next((r for r in revisions if r.current), revisions[-1] if revisions else None)
    earlier = [r for r in revisions if current is not None and r.number < current.number]
    if current is None or not earlier:
        raise LookRefused(f"deployment {target.namespace}/{target.workload} has no revision "
                          "before its current one to return to; a rollback cannot be made")
    return {"plan": rollback_plan(plan, target, current, earlier[-1]), "made_for": target.name,
            "from_revision": current.number, "to_revision": earlier[-1].number}


def rollback_plan(template: Mapping[str, Any], target: Target, current: Revision,
                  previous: Revision) -> dict[str, Any]:
    """``template`` (a k8s.rollout plan) as a rollback of ``target``'s deployment from
    ``current`` to ``previous``: set each container that differs back to its earlier image (an
    ``undo`` to that revision when no image differs); its rollback sets them forward again."""
    made = copy.deepcopy(dict(template))
    changed = sorted(c for c, image in previous.images.items()
                     if current.images.get(c) not in (None, image))
    images = ", ".join(previous.images[c] for c in changed) or f"revision {previous.number}"
    made["title"] = (f"Roll {target.name} back to revision {previous.number} ({images}) from "
                     f"revision {current.number}")
    if changed:
        made["steps"] = [_step(_rollout(target, "set-image", c, previous.images[c]))
                         for c in changed]
        made["rollback"] = {"steps": [_step(_rollout(target, "set-image", c, current.images[c]))
                                      for c in changed]}
    else:
        made["steps"] = [_step({**_rollout(target, "undo"), "to_revision": previous.number})]
        made["rollback"] = {"steps": [_step({**_rollout(target, "undo"),
                                             "to_revision": current.number})]}
    return made


def _step(params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "k8s.rollout", "params": params, "timeout_s": 600, "retry": 1}


def _rollout(target: Target, operation: str, container: str | None = None,
             image: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"operation": operation, "namespace": target.namespace,
                              "deployment": target.workload}
    if container is not None:
        params.update(container=container, image=image)
    return params


def revisions_of(history: Any) -> list[Revision]:
    """A reader's rollout history as revisions, oldest first (unreadable entries skipped)."""
    rows: Sequence[Any] = history.get("revisions", []) if isinstance(history, Mapping) \
        else history if isinstance(history, Sequence) else []
    found = [_revision(row) for row in rows if isinstance(row, Mapping)]
    return sorted((r for r in found if r is not None), key=lambda r: r.number)


def _revision(row: Mapping[str, Any]) -> Revision | None:
    try:
        number = int(row["revision"])
    except (KeyError, TypeError, ValueError):
        return None
    images = row.get("images") or {}
    return Revision(number, {str(k): str(v) for k, v in dict(images).items()},
                    row.get("created"), row.get("change_cause"), bool(row.get("current")))
