"""How the offline planner looks at the service before it proposes: it finds the case's component
in the catalog and names it, reads what changed in it, and has the plan template made for it
(``plan_template``). A deploy of the component shortly before the case opened makes the plan a
rollback of that deploy; otherwise the incident's words pick the template, as before. Without a
catalog every look answers an error and the template is proposed as the operator wrote it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from core.consumers.planner import choose_template

ROLLBACK_TEMPLATE = "k8s.rollout.canary"
RECENT = timedelta(hours=6)
Calls = list[tuple[str, dict[str, Any]]]


def next_looks(case_id: str, case: Mapping[str, Any], results: Mapping[str, Any],
               incident: str) -> Calls | None:
    """The looks still to take before a plan can be chosen; None once every one answered."""
    if "find_components" not in results and not case.get("components"):
        return [("find_components", {"query": incident[:300]})]
    found = _ok(results.get("find_components"))
    if found and not case.get("components") and "name_components" not in results:
        best = (found.get("components") or [{}])[0].get("name")
        if best:
            return [("name_components", {"case_id": case_id, "components": [best]})]
    if not _known_component(case, results):
        if found is not None and "plan_template" not in results:  # a catalog, no component
            return [("plan_template", {"template": choose_template(incident)})]
        return None
    if "recent_changes" not in results:
        return [("recent_changes", {})]
    if "plan_template" not in results:
        return [("plan_template", {"template": template_for(case, results, incident)})]
    return None


def template_for(case: Mapping[str, Any], results: Mapping[str, Any], incident: str) -> str:
    """A rollback when the component was deployed within six hours before the case opened;
    else the template the incident's words pick."""
    opened = _instant(str(case.get("created_at", "")))
    changes = _ok(results.get("recent_changes")) or {}
    deployed = [_instant(str(c.get("happened_at", ""))) for c in changes.get("changes", [])
                if c.get("kind") == "deploy"]
    if opened is not None and any(at is not None and opened - RECENT <= at <= opened
                                  for at in deployed):
        return ROLLBACK_TEMPLATE
    return choose_template(incident)


def made_plan(results: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The plan ``plan_template`` made, or why it could not be made (None, None: not asked)."""
    answer = results.get("plan_template")
    if answer is None:
        return None, None
    made = _ok(answer)
    if made and isinstance(made.get("plan"), dict):
        return made["plan"], None
    return None, str(answer.get("error") or "the template could not be made for this case")


def _known_component(case: Mapping[str, Any], results: Mapping[str, Any]) -> bool:
    named = _ok(results.get("name_components"))
    return bool(case.get("components")) or named is not None


def _ok(answer: Any) -> dict[str, Any] | None:
    """A tool's answer when it succeeded (a gateway write's ``result`` unwrapped)."""
    if not isinstance(answer, Mapping) or answer.get("error"):
        return None
    inner = answer.get("result")
    return dict(inner) if isinstance(inner, Mapping) and "status" in answer else dict(answer)


def _instant(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
