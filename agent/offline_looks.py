"""How the offline planner investigates before it proposes, in the order a careful SRE would: find
the case's component in the catalog and name it (by the report's words, else the most anomalous
of the components with firing alerts or moved metrics, the candidates said in the thread); list
its metrics and read each over the last two hours; read its alerts, recent changes, pods and
events; then decide from what they showed (``agent.offline_evidence``); the remedy
(``core.domain.remedy``) is the inverse of the cause on the object that changed, made for the
component (``plan_template``) or written here. Without a catalog it looks at nothing and the
incident's words pick a template, as written — and it says that nothing was checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.offline_evidence import Decision, Looked, decide, instant
from core.domain.plan_templates import load_template
from core.domain.remedy import TEMPLATES, Workload, annotations_of, cause_of, remedy

Calls = list[tuple[str, dict[str, Any]]]
WINDOW = timedelta(hours=2)
MAX_METRICS = 6


@dataclass(frozen=True)
class Answers:
    """The looks of this turn: each tool's answers, in the order they came."""

    by_tool: Mapping[str, Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]]

    def first(self, name: str) -> Mapping[str, Any] | None:
        found = self.by_tool.get(name) or ()
        return found[0][1] if found else None

    def asked(self, name: str) -> bool:
        return name in self.by_tool

    def ok(self, name: str) -> list[Mapping[str, Any]]:
        return [answer for _, answer in self.by_tool.get(name) or () if _ok(answer)]


def next_looks(case_id: str, case: Mapping[str, Any], answers: Answers,
               incident: str) -> Calls | None:
    """The looks still to take before a decision; None once every one answered."""
    if not case.get("components") and not answers.asked("find_components"):
        return [("find_components", {"query": incident[:300]})]
    found = _ok(answers.first("find_components"))
    if found and not case.get("components") and not answers.asked("name_components"):
        # Named by the report's words, else the most anomalous of the components with symptoms
        # (``core.investigate.symptoms``), whose sentence naming them goes to the thread.
        listed = found.get("components") or found.get("by_symptoms") or [{}]
        best = listed[0].get("name") if isinstance(listed[0], Mapping) else None
        told = [] if found.get("components") or not found.get("said") or \
            answers.asked("add_note") else [("add_note", {"case_id": case_id,
                                                          "text": str(found["said"])})]
        if best:
            return [("name_components", {"case_id": case_id, "components": [best]}), *told]
        if told:
            return told
    if not _component(case, answers):
        return None
    if not answers.asked("list_metrics"):
        return [("list_metrics", {})]
    reads = [] if answers.asked("query_metrics") else _metric_reads(case, answers)
    if reads:
        return reads
    if not answers.asked("recent_changes"):
        return _other_looks(_component_name(case, answers))
    return None


def _metric_reads(case: Mapping[str, Any], answers: Answers) -> Calls:
    listing = _ok(answers.first("list_metrics")) or {}
    selector = str(listing.get("selector") or "")
    names = [str(n) for n in listing.get("metrics") or ()][:MAX_METRICS]
    opened = instant(str(case.get("created_at", ""))) or datetime.now(UTC)
    start = (opened - WINDOW).isoformat().replace("+00:00", "Z")
    return [("query_metrics", {"query": f"{name}{selector}", "start": start, "step_s": 60})
            for name in names]


def _other_looks(component: str | None) -> Calls:
    catalog = [("find_components", {"query": component})] if component else []
    return [("list_alerts", {}), ("recent_changes", {"hours": 24}),
            ("kube_objects", {"kind": "deployments"}), ("kube_objects", {"kind": "pods"}),
            ("kube_events", {"since_minutes": 120}), *catalog]


def _component_name(case: Mapping[str, Any], answers: Answers) -> str | None:
    """The case's component: the first it names, else the one the planner named."""
    named = case.get("components") or []
    if named:
        first = named[0]
        return str(first.get("name") if isinstance(first, Mapping) else first)
    done = _ok(answers.first("name_components")) or {}
    listed = done.get("components") or []
    return str(listed[0]) if listed and isinstance(listed[0], str) else None


def unnamed(answers: Answers) -> str | None:
    """Why no component is investigated when the catalog answered (the report names none and
    none shows symptoms, in the look's sentence); None without a catalog."""
    found = _ok(answers.first("find_components"))
    if found is None or found.get("components") or found.get("by_symptoms"):
        return None
    return str(found.get("said") or "the report names no catalog component")


def looked(answers: Answers) -> Looked:
    refused = [str(answer.get("error")) for _, answer in answers.by_tool.get("query_metrics", ())
               if answer.get("error")] or [str((answers.first("list_metrics") or {}).get(
                   "error") or "")]
    return Looked(metrics=answers.ok("query_metrics"),
                  changes=[c for a in answers.ok("recent_changes") for c in a.get("changes", ())],
                  alerts=answers.ok("list_alerts"),
                  pods=[a for a in answers.ok("kube_objects") if a.get("kind") == "pods"],
                  events=answers.ok("kube_events"),
                  metrics_refused=next((r for r in refused if r), None))


def decision(case: Mapping[str, Any], answers: Answers,
             past_plan: Mapping[str, Any] | None) -> Decision:
    opened = instant(str(case.get("created_at", ""))) or datetime.now(UTC)
    return decide(looked(answers), opened, past_plan)


def template_call(chosen: Decision) -> Calls | None:
    """The ``plan_template`` look the remedy needs (a deploy's rollback to its named revision,
    a restart), else None."""
    name = TEMPLATES.get(cause_of(chosen.action, chosen.change))
    return [("plan_template", {"template": name})] if name else None


def written_plan(chosen: Decision, answers: Answers) -> dict[str, Any] | None:
    """The plan for a decision no template is made for, written from what the looks showed."""
    if chosen.action == "no change":
        plan = load_template("noop")
        plan["title"] = "No change: " + (chosen.because[-1] if chosen.because else
                                         "nothing was found to act on")
        return with_checks(plan, chosen)
    found = [c for a in answers.ok("find_components") for c in a.get("components") or ()]
    made = remedy(cause_of(chosen.action, chosen.change), chosen.change, _where(answers),
                  annotations_of(found, None), chosen.checks, replicas=chosen.replicas)
    return with_checks(made.plan, chosen) if made.plan is not None else None


def with_checks(plan: dict[str, Any], chosen: Decision) -> dict[str, Any]:
    """``plan`` checked by what the looks showed is wrong (when they showed something)."""
    made = dict(plan)
    if chosen.checks:
        made["verify"] = {"checks": [dict(check) for check in chosen.checks]}
    made["title"] = str(made.get("title", "plan"))[:200]
    return made


def made_plan(answers: Answers, chosen: Decision | None = None
              ) -> tuple[dict[str, Any] | None, str | None]:
    """The plan ``plan_template`` made, or why it could not be made (None, None: not asked);
    a rollback whose revision left is not the suspected deploy is not made."""
    answer = answers.first("plan_template")
    if answer is None:
        return None, None
    made = _ok(answer)
    if made and isinstance(made.get("plan"), dict):
        elsewhere = _not_the_suspect(chosen, answers)
        if elsewhere is not None:
            return None, elsewhere
        return dict(made["plan"]), None
    return None, str(answer.get("error") or "the template could not be made for this case")


def _not_the_suspect(chosen: Decision | None, answers: Answers) -> str | None:
    """Why rolling the Deployment's current revision back would not undo the suspected deploy
    (it runs no image of the deploy's version); None when it would, or nobody can tell."""
    change = (chosen.change if chosen is not None else None) or {}
    version = str(change.get("version") or "")
    if chosen is None or cause_of(chosen.action, change) != "deploy" or not version:
        return None
    for answer in answers.ok("kube_objects"):
        for found in answer.get("deployments") or [] if answer.get("kind") == "deployments" \
                else []:
            images = found.get("images") if isinstance(found.get("images"), Mapping) else {}
            if images and not any(str(i).endswith(f":{version}") for i in images.values()):
                return (f"deployment {answer.get('namespace')}/{found.get('name')} runs "
                        f"{', '.join(map(str, images.values()))}, not {version} that the "
                        "suspected deploy brought: rolling its current revision back would "
                        "undo another change")
            return None
    return None


def where_of(answers: Answers) -> Workload | None:
    """The component's first Deployment: where, its desired replicas, what it mounts."""
    return _where(answers)


def _where(answers: Answers) -> Workload | None:
    """The component's first Deployment: where, its desired replicas, what it mounts."""
    for answer in answers.ok("kube_objects"):
        found = answer.get("deployments") or [] if answer.get("kind") == "deployments" else []
        for deployment in found:
            desired = (deployment.get("replicas") or {}).get("desired") or 1
            mounts = deployment.get("configmaps")
            if answer.get("namespace") and deployment.get("name"):
                return Workload(str(answer["namespace"]), str(deployment["name"]), int(desired),
                                tuple(map(str, mounts)) if isinstance(mounts, list) else None)
    return None


def _component(case: Mapping[str, Any], answers: Answers) -> bool:
    return bool(case.get("components")) or _ok(answers.first("name_components")) is not None


def _ok(answer: Any) -> dict[str, Any] | None:
    """A tool's answer when it succeeded (a gateway write's ``result`` unwrapped)."""
    if not isinstance(answer, Mapping) or answer.get("error"):
        return None
    inner = answer.get("result")
    return dict(inner) if isinstance(inner, Mapping) and "status" in answer else dict(answer)
