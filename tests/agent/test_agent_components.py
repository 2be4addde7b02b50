"""The agent may name the catalog components a case concerns (issue 27): once, before a plan
reaches the gate, only names the catalog has; they are context, never a step's owner."""

from __future__ import annotations

import json
from pathlib import Path

from langchain_core.messages import ToolMessage
from sqlalchemy import Engine

from agent.scripted import ScriptedChatModel
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plan_templates import load_template
from tests.support.agents import agent_app, ai, call, case_at, events, make_agent

CATALOG = Path(__file__).parents[2] / "docs" / "examples" / "catalog"
RESTART = load_template("script.restart")  # script.exec on an entry naming no component


def answers(model: ScriptedChatModel) -> list[dict[str, object]]:
    return [json.loads(str(m.content)) for m in model.seen[-1] if isinstance(m, ToolMessage)]


def test_the_agent_names_the_components_once_and_they_own_no_step(
        engine: Engine) -> None:
    app = agent_app(engine, catalog=CATALOG, approvers=[])
    case_id = case_at(app, CaseStatus.PLANNING)
    model = ScriptedChatModel(turns=[
        ai(call("name_components", "t-1", case_id=str(case_id), components=["payments-apii"]),
           call("name_components", "t-2", case_id=str(case_id), components=["payments-api"]),
           call("name_components", "t-3", case_id=str(case_id), components=["search-api"]),
           call("propose_plan", "t-4", case_id=str(case_id), plan=RESTART)),
        ai(content="named and proposed"),
    ])
    turn = make_agent(app, model).run_turn(case_id, "plan it", requester="U0ERIN",
                                           correlation_id="c", trigger="chat")
    assert turn.outcome == "answered"
    unknown, named, again, proposed = answers(model)
    assert "unknown component payments-apii" in json.dumps(unknown)
    assert named["status"] == "ok" and proposed["status"] == "ok"
    assert "already names payments-api" in json.dumps(again)
    assert app.cases.get_case(case_id)["components"] == ["payments-api"]
    [note] = events(app, case_id, "components_named")
    assert (note["actor"], note["reason"]) == ("agent", "the case concerns payments-api")

    gate = app.cases.gate_status(case_id)
    assert gate is not None and gate.state == "pending"
    subject = app.policy.at(["payments-api"], None).subject(RESTART, "U0ERIN")
    # The case's components are context, never the script's owner: its allow-list entry names
    # no component, so nobody owns the step (issue 40).
    assert subject.components == () and [t.step.label for t in subject.unowned] == [
        "step 1 (script.exec)"]


def test_components_are_not_named_once_a_plan_waits_at_the_gate(engine: Engine) -> None:
    app = agent_app(engine, catalog=CATALOG)
    case_id = case_at(app, CaseStatus.PLANNING)
    app.cases.transition(TransitionCase(case_id, CaseEvent.PLAN_READY, actor="agent",
                                        plan=RESTART, requester="U0ERIN"), "to-the-gate").data()
    model = ScriptedChatModel(turns=[
        ai(call("name_components", "t-1", case_id=str(case_id), components=["payments-api"])),
        ai(content="too late"),
    ])
    make_agent(app, model).run_turn(case_id, "name it", requester="U0ERIN",
                                    correlation_id="c", trigger="chat")
    [refused] = answers(model)
    assert "components are named before a plan reaches the gate" in json.dumps(refused)
    assert "components" not in app.cases.get_case(case_id)
    assert events(app, case_id, "components_named") == []
