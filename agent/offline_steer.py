"""How the offline planner takes a person's words after a Reject or a resume ("restart instead",
"don't roll back", "scale to 10"): it does what they ask where the evidence allows it, and says
why not, citing the look, where the evidence forbids it; it never proposes again the remedy of the
plan a person just rejected (nor a plan the case declined, by its hash) unless they ask for it or
for a retry — then it proposes no change and asks the person what to do.

Pure: it reads the decision the looks led to (``agent.offline_evidence``), what the looks showed,
and what the replan request says (``agent.prompts.replan_asked``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agent.offline_evidence import HEADROOM, Decision, Looked, decide
from agent.prompts import Asked
from core.domain.plan_templates import load_template
from core.domain.plans import plan_hash
from core.domain.steering import SAID, TEMPLATES, Remedy, Steer, steer_of

WORDS_TEMPLATES = TEMPLATES


@dataclass(frozen=True)
class Steered:
    """The decision after the person's words, and what to tell them about those words."""

    decision: Decision
    said: str = ""
    excluded: frozenset[str] = frozenset()


def remedy_of_steps(steps: str) -> Remedy | None:
    """The remedy a plan's steps (``agent.prompts.steps_in_words``) carry out."""
    lowered = steps.lower()
    for remedy, marks in (("rollback", ("undo", "rollback", "set-image")), ("scale", ("scale",)),
                          ("failover", ("gateway.flip", "failover")),
                          ("restart", ("restart",)), ("no change", ("noop",))):
        if any(mark in lowered for mark in marks):
            return remedy  # type: ignore[return-value]
    return None


def steer_asked(asked: Asked) -> Steer:
    """What the person asks: their resume's words first, else the reason of their Reject."""
    return steer_of(asked.words, asked.rejected_because)


def excluded_remedies(asked: Asked, steer: Steer) -> frozenset[str]:
    """The remedies not to propose: those the words rule out, and the rejected plan's (unless
    the words ask for it again, or for a retry)."""
    rejected = remedy_of_steps(asked.last_steps) if asked.rejected_because or asked.last_steps \
        else None
    out = set(steer.avoid)
    if rejected is not None and not asked.retry and steer.want != rejected:
        out.add(rejected)
    return frozenset(out)


def steered(chosen: Decision, looked: Looked, opened_at: datetime, asked: Asked,
            replicas_now: int | None) -> Steered:
    """``chosen`` turned the way the person's words ask, where the evidence allows it."""
    steer = steer_asked(asked)
    excluded = excluded_remedies(asked, steer)
    said = ""
    if steer.want is not None and steer.want not in excluded:
        forbidden = forbids(steer, chosen, looked, replicas_now)
        if forbidden is None:
            heard = f"{asked_by(asked)} asked to {steer.said()}"
            change = chosen.change or next(reversed(list(looked.changes)), None)
            return Steered(_as(chosen, steer.want, heard, steer.replicas, change),
                           f"As {heard}, the plan does that; the evidence allows it.", excluded)
        said = f"I did not {SAID[steer.want]} as asked: {forbidden}."
    if chosen.action not in excluded:
        return Steered(chosen, said, excluded)
    for other in alternatives(chosen, looked, opened_at):
        if other.action not in excluded:
            why = f"{SAID[chosen.action]} was ruled out ({_ruled_out(asked, steer)})"
            return Steered(other, f"{said} {why[:1].upper()}{why[1:]}: the evidence's next "
                                  f"choice is to "
                                  f"{SAID[other.action]}.".strip(), excluded)
    return Steered(ask_person(chosen, _ruled_out(asked, steer)), said, excluded)


def forbids(steer: Steer, chosen: Decision, looked: Looked,
            replicas_now: int | None) -> str | None:
    """Why the evidence forbids what the person asks, citing the look; None when it allows it."""
    signals = looked.signals()
    if steer.want == "rollback" and chosen.change is None and not list(looked.changes):
        return ("recent_changes shows no change of the component in the last 24 hours: there "
                "is nothing to roll back")
    if steer.want == "failover":
        standby = [s for s in signals if s.kind == "standby"]
        if not standby:
            return ("no standby shows in the component's metrics (list_metrics): there is "
                    "nowhere to fail over to")
        if standby[0].last >= HEADROOM:
            return (f"the standby's {standby[0].metric} is {standby[0].fig(standby[0].last)} "
                    "(query_metrics): it has no headroom to take the traffic")
    if steer.want != "scale":
        return None
    if replicas_now is None:
        return ("kube_objects shows no Deployment of the component (or it could not be read): "
                "there is nothing to scale")
    if steer.replicas is not None and steer.replicas < replicas_now \
            and any(s.state == "ongoing" for s in signals):
        return (f"{replicas_now} replicas run now (kube_objects) and the component is still "
                f"anomalous: {steer.replicas} would put the same load on fewer pods")
    return None


def alternatives(chosen: Decision, looked: Looked, opened_at: datetime) -> list[Decision]:
    """What the evidence supports besides ``chosen``: its choice without the suspected change,
    then a restart while anything is anomalous."""
    found = [decide(replace(looked, changes=()), opened_at, None)]
    if any(s.state == "ongoing" for s in looked.signals()):
        found.append(_as(chosen, "restart", "the service may be stuck", None))
    return [d for d in found if d.action != chosen.action]


def ask_person(chosen: Decision, why: str) -> Decision:
    """No change, and a person says what to try: every remedy the evidence allows was ruled
    out."""
    return Decision("no change", (*chosen.because, f"every remedy the evidence allows was ruled "
                                                   f"out ({why}): a person decides what to try "
                                                   "(/case resume <id> <what to try>)"),
                    chosen.checks)


def declined_plan(plan: Mapping[str, Any], asked: Asked) -> bool:
    """Whether ``plan`` is one the case declined (its hash), and nobody asked for a retry."""
    digest = plan_hash(plan)
    return not asked.retry and any(digest.startswith(prefix) for prefix in asked.declined)


def words_plan(incident_template: str, asked: Asked) -> tuple[dict[str, Any], str]:
    """Without a look (no catalog): the template the person's words pick, else the one the
    incident's words picked unless its remedy was ruled out; and what to tell them."""
    steer = steer_asked(asked)
    excluded = excluded_remedies(asked, steer)
    if steer.want is not None and steer.want not in excluded and steer.want in WORDS_TEMPLATES:
        return load_template(WORDS_TEMPLATES[steer.want]), \
            f"As {asked_by(asked)} asked to {steer.said()}, the plan does that."
    plan = load_template(incident_template)
    if remedy_of_steps(" ".join(str(s.get("action")) + " " + str(s.get("params"))
                                for s in plan.get("steps") or ())) in excluded \
            or declined_plan(plan, asked):
        plan = load_template("noop")
        plan["title"] = ("No change: " + _ruled_out(asked, steer) + "; a person decides what to "
                         "try (/case resume <id> <what to try>)")[:200]
        return plan, "The plan the incident's words pick was ruled out: a person decides."
    return plan, ""


def asked_by(asked: Asked) -> str:
    return "you" if asked.words or asked.rejected_because else "the person"


def _ruled_out(asked: Asked, steer: Steer) -> str:
    if steer.avoid:
        return f"the person asked: {steer.said()}"
    if asked.rejected_because:
        return f"the plan was rejected: \"{asked.rejected_because[:120]}\""
    return "the plan was rejected at the gate"


def _as(chosen: Decision, action: str, heard: str, replicas: int | None,
        change: Mapping[str, Any] | None = None) -> Decision:
    return Decision(action, (*chosen.because, heard), chosen.checks,  # type: ignore[arg-type]
                    (change or chosen.change) if action == "rollback" else None, chosen.notes,
                    replicas=replicas)
