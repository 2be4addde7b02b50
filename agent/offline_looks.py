"""How the offline planner investigates before it proposes, in the order a careful SRE would: find
the case's component in the catalog and name it (by the report's words, else the most anomalous
of the components with firing alerts or moved metrics, the candidates said in the thread); list
its metrics and read each over the last two hours; read its alerts, recent changes, pods and
events; then decide from what they showed (``agent.offline_evidence``) and have the plan made for
the component (``plan_template``) or write it. Without a catalog it looks at nothing and the
incident's words pick a template, as written — and it says that nothing was checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.offline_evidence import Decision, Looked, decide, instant
from core.domain.plan_templates import load_template

Calls = list[tuple[str, dict[str, Any]]]
WINDOW = timedelta(hours=2)
MAX_METRICS = 6
TEMPLATES = {"rollback": "k8s.rollout.canary", "restart": "script.restart"}


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
        return _other_looks()
    return None


def _metric_reads(case: Mapping[str, Any], answers: Answers) -> Calls:
    listing = _ok(answers.first("list_metrics")) or {}
    selector = str(listing.get("selector") or "")
    names = [str(n) for n in listing.get("metrics") or ()][:MAX_METRICS]
    opened = instant(str(case.get("created_at", ""))) or datetime.now(UTC)
    start = (opened - WINDOW).isoformat().replace("+00:00", "Z")
    return [("query_metrics", {"query": f"{name}{selector}", "start": start, "step_s": 60})
            for name in names]


def _other_looks() -> Calls:
    return [("list_alerts", {}), ("recent_changes", {"hours": 24}),
            ("kube_objects", {"kind": "deployments"}), ("kube_objects", {"kind": "pods"}),
            ("kube_events", {"since_minutes": 120})]


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
    """The ``plan_template`` look the decision needs (a rollback, a restart), else None."""
    if chosen.action == "rollback" and (chosen.change or {}).get("kind") == "config":
        return None
    name = TEMPLATES.get(chosen.action)
    return [("plan_template", {"template": name})] if name else None


def written_plan(chosen: Decision, answers: Answers) -> dict[str, Any] | None:
    """The plan for a decision no template is made for, written from what the looks showed."""
    where = _where(answers)
    if chosen.action == "failover":
        plan = load_template("gateway.flip.failover")
    elif chosen.action == "no change":
        plan = load_template("noop")
        plan["title"] = "No change: " + (chosen.because[-1] if chosen.because else
                                         "nothing was found to act on")
    elif chosen.action == "scale" and where is not None:
        plan = _scale(*where, to=chosen.replicas)
    elif chosen.action == "rollback" and where is not None:
        plan = _undo(*where, chosen.change or {})
    else:
        return None
    return with_checks(plan, chosen)


def with_checks(plan: dict[str, Any], chosen: Decision) -> dict[str, Any]:
    """``plan`` checked by what the looks showed is wrong (when they showed something)."""
    made = dict(plan)
    if chosen.checks:
        made["verify"] = {"checks": [dict(check) for check in chosen.checks]}
    made["title"] = str(made.get("title", "plan"))[:200]
    return made


def made_plan(answers: Answers) -> tuple[dict[str, Any] | None, str | None]:
    """The plan ``plan_template`` made, or why it could not be made (None, None: not asked)."""
    answer = answers.first("plan_template")
    if answer is None:
        return None, None
    made = _ok(answer)
    if made and isinstance(made.get("plan"), dict):
        return dict(made["plan"]), None
    return None, str(answer.get("error") or "the template could not be made for this case")


def _scale(namespace: str, deployment: str, replicas: int,
           to: int | None = None) -> dict[str, Any]:
    target, wanted = f"{namespace}/{deployment}", to or replicas * 2
    return {"title": f"Scale {target} out from {replicas} to {wanted} replicas",
            "risk_score": 0.3,
            "steps": [{"action": "script.exec", "params": {"argv": [
                "scale-deployment", target, f"--replicas={wanted}"]}, "timeout_s": 300,
                "retry": 1}],
            "rollback": {"action": "script.exec", "params": {"argv": [
                "scale-deployment", target, f"--replicas={replicas}"]}}}


def _undo(namespace: str, deployment: str, _replicas: int,
          change: Mapping[str, Any]) -> dict[str, Any]:
    what = f"{change.get('kind', 'change')} {change.get('version') or ''}".strip()
    return {"title": f"Roll {namespace}/{deployment} back to its revision before the {what}",
            "risk_score": 0.4,
            "steps": [{"action": "k8s.rollout", "params": {
                "operation": "undo", "namespace": namespace, "deployment": deployment},
                "timeout_s": 600, "retry": 1}],
            "rollback": {"action": "k8s.rollout", "params": {
                "operation": "restart", "namespace": namespace, "deployment": deployment}}}


def where_of(answers: Answers) -> tuple[str, str, int] | None:
    """(namespace, deployment, desired replicas) of the component's first Deployment."""
    return _where(answers)


def _where(answers: Answers) -> tuple[str, str, int] | None:
    """(namespace, deployment, desired replicas) of the component's first Deployment."""
    for answer in answers.ok("kube_objects"):
        found = answer.get("deployments") or [] if answer.get("kind") == "deployments" else []
        for deployment in found:
            desired = (deployment.get("replicas") or {}).get("desired") or 1
            if answer.get("namespace") and deployment.get("name"):
                return str(answer["namespace"]), str(deployment["name"]), int(desired)
    return None


def _component(case: Mapping[str, Any], answers: Answers) -> bool:
    return bool(case.get("components")) or _ok(answers.first("name_components")) is not None


def _ok(answer: Any) -> dict[str, Any] | None:
    """A tool's answer when it succeeded (a gateway write's ``result`` unwrapped)."""
    if not isinstance(answer, Mapping) or answer.get("error"):
        return None
    inner = answer.get("result")
    return dict(inner) if isinstance(inner, Mapping) and "status" in answer else dict(answer)
