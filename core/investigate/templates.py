"""Plan templates made for the case's component: the namespace, deployment and container from the
catalog and Kubernetes, and a rollback to the revision before the component's last change — not
``prod/app``. A template that cannot be made for the component (no component, no deployment, no
revision to return to) is refused with the reason. An installation without a catalog gets the
template as the operator wrote it (seed 004's ``/plan/generate`` walkthrough). What the catalog
and the cluster report is checked as the k8s.rollout adapter will check it: a name or image it
would refuse makes the template refused here, never a plan that cannot run. With Prometheus, a
template's verify check that names a bare metric (``http_5xx_ratio``) is made to read the
component's series (``http_5xx_ratio{service="payments-api"}``): the ``plan_ready`` guard admits
only checks of the component (docs/approvals.md "Checks that measure the service")."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from core.domain.plan_templates import load_template, template_names
from core.domain.promql import quoted
from core.investigate.looks import LookRefused
from core.investigate.scope import Labels, OutOfScope, Target
from core.steps.adapters.k8s import RolloutParams

if TYPE_CHECKING:
    from core.investigate.looks import CaseLooks

TITLE_LENGTH = 200  # the ChangePlan schema's maxLength of a title
MAX_STEPS = 50  # the ChangePlan schema's maxItems of steps
MAX_REVISION = 2_147_483_647  # the highest revision k8s.rollout's undo takes
CANNOT = "a rollback cannot be made"


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
    made = _made(looks, template, component)
    if looks.sources.metrics is None:  # a stand-in table reads names, not series
        return made
    try:
        target = looks.scope.metrics(component)
    except OutOfScope:  # no one component to read: the guard says what the checks lack
        return made
    return {**made, "plan": measuring(made["plan"], target.metric_labels)}


def measuring(plan: Mapping[str, Any], labels: Labels) -> dict[str, Any]:
    """``plan`` with each verify check that names a bare metric reading it for ``labels``."""
    made = copy.deepcopy(dict(plan))
    verify = made.get("verify")
    checks = verify.get("checks") if isinstance(verify, dict) else None
    for check in checks if isinstance(checks, list) else [verify]:
        metric = check.get("metric") if isinstance(check, dict) else None
        if isinstance(check, dict) and isinstance(metric, str) and METRIC_NAME.fullmatch(metric):
            matchers = ", ".join(f"{key}={quoted(value)}" for key, value in labels)
            check["metric"] = f"{metric}{{{matchers}}}"
    return made


METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _made(looks: CaseLooks, template: str, component: str | None) -> dict[str, Any]:
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
    if _refused_fields(_rollout(target, "restart")):
        raise LookRefused(f"{target.name}'s deployment {target.namespace!r}/"
                          f"{target.workload!r} in the catalog is not a Kubernetes namespace "
                          "and name; this template cannot be made for it")
    return target


def _restart(plan: dict[str, Any], target: Target) -> dict[str, Any]:
    made = copy.deepcopy(plan)
    made["title"] = _title(f"Restart {target.name} (deployment {target.namespace}/"
                           f"{target.workload})")
    made["steps"] = [{"action": "k8s.rollout", "timeout_s": 600, "retry": 1,
                      "params": _rollout(target, "restart")}]
    return {"plan": made, "made_for": target.name}


def _rollback(looks: CaseLooks, plan: dict[str, Any], target: Target) -> dict[str, Any]:
    target = _deployment_of(target)
    kubernetes = looks.sources.kubernetes
    if kubernetes is None:
        raise LookRefused(f"no Kubernetes API is configured, so the revision {target.name} "
                          "ran before its last change is unknown; a rollback cannot be made")
    revisions = _told_once(revisions_of(kubernetes.rollout_history(target, None)))
    current = _current(revisions)
    earlier = [r for r in revisions if current is not None and r.number < current.number]
    if current is None or not earlier:
        raise LookRefused(f"deployment {target.namespace}/{target.workload} has no revision "
                          f"before its current one to return to; {CANNOT}")
    return {"plan": rollback_plan(plan, target, current, earlier[-1]), "made_for": target.name,
            "from_revision": current.number, "to_revision": earlier[-1].number}


def _told_once(revisions: list[Revision]) -> list[Revision]:
    """``revisions`` when no revision is told twice with different images."""
    seen: dict[int, Revision] = {}
    for revision in revisions:
        if seen.setdefault(revision.number, revision).images != revision.images:
            raise LookRefused(f"the rollout history tells revision {revision.number} twice, "
                              f"with different images; {CANNOT}")
    return revisions


def _current(revisions: list[Revision]) -> Revision | None:
    """The revision marked current (the newest when none is marked); refused when the history
    marks several."""
    marked = sorted({r.number for r in revisions if r.current})
    if len(marked) > 1:
        raise LookRefused(f"the rollout history marks revisions {', '.join(map(str, marked))} "
                          f"all current; {CANNOT}")
    return next((r for r in revisions if r.current), revisions[-1] if revisions else None)


def rollback_plan(template: Mapping[str, Any], target: Target, current: Revision,
                  previous: Revision) -> dict[str, Any]:
    """``template`` (a k8s.rollout plan) as a rollback of ``target``'s deployment from
    ``current`` to ``previous``: set each container that differs back to its earlier image (an
    ``undo`` to that revision when no image differs); its rollback sets them forward again.
    ``LookRefused`` when a revision, container or image is not one the adapter would take."""
    for revision in (current, previous):
        if not 1 <= revision.number <= MAX_REVISION:
            raise LookRefused(f"revision {revision.number} of deployment {target.namespace}/"
                              f"{target.workload} is not a revision Kubernetes gives (1 to "
                              f"{MAX_REVISION}); {CANNOT}")
    made = copy.deepcopy(dict(template))
    changed = sorted(c for c, image in previous.images.items()
                     if current.images.get(c) not in (None, image))
    if len(changed) > MAX_STEPS:
        raise LookRefused(f"revision {previous.number} differs from revision {current.number} "
                          f"in {len(changed)} containers, more than a plan's {MAX_STEPS} steps; "
                          f"{CANNOT}")
    images = ", ".join(previous.images[c] for c in changed) or f"revision {previous.number}"
    made["title"] = _title(f"Roll {target.name} back to revision {previous.number} (", images,
                           f") from revision {current.number}")
    if changed:
        made["steps"] = [_step(_set_image(target, previous, c)) for c in changed]
        made["rollback"] = {"steps": [_step(_set_image(target, current, c)) for c in changed]}
    else:
        made["steps"] = [_step({**_rollout(target, "undo"), "to_revision": previous.number})]
        made["rollback"] = {"steps": [_step({**_rollout(target, "undo"),
                                             "to_revision": current.number})]}
    return made


def _set_image(target: Target, revision: Revision, container: str) -> dict[str, Any]:
    """Set ``container`` to its image in ``revision``; refused, with the reason, when the
    k8s.rollout adapter would refuse the container's name or the image."""
    params = _rollout(target, "set-image", container, revision.images[container])
    refused = _refused_fields(params)
    if "container" in refused:
        raise LookRefused(f"container {_shown(container)} of revision {revision.number} is not "
                          f"a Kubernetes container name; {CANNOT}")
    if "image" in refused:
        raise LookRefused(f"revision {revision.number}'s image {_shown(params['image'])} of "
                          f"container {container!r} is not an image reference; {CANNOT}")
    if refused:
        raise LookRefused(f"deployment {target.namespace!r}/{target.workload!r} is not a "
                          f"Kubernetes namespace and name; {CANNOT}")
    return params


def _refused_fields(params: Mapping[str, Any]) -> set[str]:
    """The fields of ``params`` the k8s.rollout adapter would refuse (empty: none)."""
    try:
        RolloutParams.model_validate(dict(params))
    except ValidationError as invalid:
        return {str(error["loc"][0]) if error["loc"] else "params"
                for error in invalid.errors(include_url=False)}
    return set()


def _title(before: str, middle: str = "", after: str = "") -> str:
    """A title within the schema's length: its ``middle`` (the images) cut first, then its
    end."""
    over = len(before) + len(middle) + len(after) - TITLE_LENGTH
    if over > 0 and len(middle) > over + 1:
        middle = f"{middle[:len(middle) - over - 1]}…"
    title = before + middle + after
    return title if len(title) <= TITLE_LENGTH else f"{title[:TITLE_LENGTH - 1]}…"


def _shown(text: str, limit: int = 80) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit - 1]}…"


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
    """A row with a revision number (an integer, or its digits as Kubernetes' annotation
    writes it); its images as text (anything else is not an image); current only when it says
    ``true``."""
    number = row.get("revision")
    if isinstance(number, str) and DIGITS.fullmatch(number):
        number = int(number)
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    images = row.get("images")
    images = images if isinstance(images, Mapping) else {}
    return Revision(number, {k: v for k, v in images.items()
                             if isinstance(k, str) and isinstance(v, str)},
                    _text(row.get("created")), _text(row.get("change_cause")),
                    row.get("current") is True)


DIGITS = re.compile(r"[0-9]{1,30}")  # longer: no revision, and int() of it is slow


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
