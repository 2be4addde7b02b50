"""Resuming a case thread from its checkpoints: after an interrupt before the tool node, and
after a crash in the middle of the tool node. The resumed run replays what already ran (the
gateway answers with the stored outcome) and runs only what had not."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine

from agent.planner import AgentPlanner
from agent.replies import ToolReply
from agent.scripted import ScriptedChatModel
from agent.tools import CaseTools
from core.bootstrap import App
from core.domain.fsm import CaseStatus
from core.domain.plan_templates import load_template
from tests.support.agents import (
    agent_app,
    ai,
    call,
    case_at,
    events,
    make_agent,
    plan_delivery,
    plans,
)

NOOP = load_template("noop")


class Crash(Exception):
    """The process dies here (as far as the graph is concerned)."""


def crash_after(side_effects: int) -> type[CaseTools]:
    """Tools that die right after the ``side_effects``-th side effect ran."""

    class CrashingTools(CaseTools):
        ran = 0

        def call(self, name: str, args: Any) -> ToolReply:
            reply = super().call(name, args)
            if name in ("add_note", "propose_plan"):
                CrashingTools.ran += 1
                if CrashingTools.ran == side_effects:
                    raise Crash(f"killed after {name}")
            return reply

    return CrashingTools


def script(case_id: UUID) -> ScriptedChatModel:
    return ScriptedChatModel(turns=[
        ai(call("add_note", "t-1", case_id=str(case_id), text="Planning a no-op watch."),
           call("propose_plan", "t-2", case_id=str(case_id), plan=NOOP)),
        ai(content="proposed"),
    ])


def statuses(model: ScriptedChatModel) -> list[str]:
    import json

    from langchain_core.messages import ToolMessage

    return [json.loads(str(m.content)).get("status", "") for m in model.seen[-1]
            if isinstance(m, ToolMessage)]


def test_resume_after_an_interrupt_runs_the_tools_once(engine: Engine) -> None:
    app = agent_app(engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    model = script(case_id)

    paused = make_agent(app, model, interrupt_before=["tools"]).run_turn(
        case_id, "plan it", requester="U1", correlation_id="c", trigger="chat")
    assert paused.outcome == "interrupted" and plans(engine, case_id) == 0
    assert app.chat.thread(str(case_id)) == []  # type: ignore[attr-defined]

    # a new process: a fresh agent and checkpointer connection resume the thread
    resumed = make_agent(app, model).run_turn(case_id, None, requester="U1",
                                              correlation_id="c", trigger="chat")

    assert (resumed.outcome, resumed.reply) == ("answered", "proposed")
    assert statuses(model) == ["ok", "ok"]
    assert plans(engine, case_id) == 1
    assert app.chat.thread(str(case_id)) == ["Planning a no-op watch."]  # type: ignore[attr-defined]


def test_resume_after_a_crash_mid_tool_node_replays_only(engine: Engine) -> None:
    app = agent_app(engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    model = script(case_id)
    delivery = plan_delivery(app, case_id)
    dying = make_agent(app, model, tool_factory=crash_after(1))

    with pytest.raises(Crash):
        AgentPlanner(app, dying).handle(delivery)
    assert app.chat.thread(str(case_id)) == ["Planning a no-op watch."]  # type: ignore[attr-defined]
    assert plans(engine, case_id) == 0

    # the message is redelivered to a restarted planner
    AgentPlanner(app, make_agent(app, model)).handle(delivery)

    assert statuses(model) == ["replayed", "ok"]  # the update replayed, the plan ran once
    assert app.chat.thread(str(case_id)) == ["Planning a no-op watch."]  # type: ignore[attr-defined]
    assert len(events(app, case_id, "agent_update")) == 1
    assert plans(engine, case_id) == 1
    assert app.cases.get_case(case_id)["status"] == "WAIT_GATE"
    assert not model.turns  # the resumed turn did the work; the request was not asked again


def test_a_crash_after_every_side_effect_still_runs_each_once(sqlite_engine: Engine) -> None:
    app: App = agent_app(sqlite_engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    model = script(case_id)
    delivery = plan_delivery(app, case_id)

    with pytest.raises(Crash):
        AgentPlanner(app, make_agent(app, model, tool_factory=crash_after(2))).handle(delivery)
    assert plans(sqlite_engine, case_id) == 1  # both ran; the crash lost the tool answers

    # the redelivered command is stale (the case moved on): no turn starts
    AgentPlanner(app, make_agent(app, model)).handle(delivery)
    assert len(model.seen) == 1
    # the next turn on the case finishes the cut-off one first: both calls replay
    model.turns.append(ai(content="it waits at the gate"))
    reply = make_agent(app, model).converse(case_id, "status?", user="U1", correlation_id="c2")

    assert reply == "it waits at the gate"
    assert statuses(model) == ["replayed", "replayed"]
    assert plans(sqlite_engine, case_id) == 1
    assert len(app.chat.thread(str(case_id))) == 1  # type: ignore[attr-defined]


def test_converse_answers_even_when_its_turn_dies(sqlite_engine: Engine) -> None:
    app = agent_app(sqlite_engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    model = script(case_id)

    reply = make_agent(app, model, tool_factory=crash_after(1)).converse(
        case_id, "plan it", user="U1", correlation_id="c")

    assert "internal error" in reply
    model.turns.append(ai(content="resumed"))
    assert make_agent(app, model).converse(case_id, "and?", user="U1",
                                           correlation_id="c2") == "resumed"
    assert statuses(model) == ["replayed", "ok"] and plans(sqlite_engine, case_id) == 1


def test_a_turn_that_dies_before_its_graph_runs_frees_the_case_lock(sqlite_engine: Engine) -> None:
    """The checkpointer's set-up (or the tools') failing must not hold the case for the lock's
    lease: the next turn runs at once (it waits at most ``lock_wait_s``, here none)."""
    app = agent_app(sqlite_engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    model = script(case_id)

    def broken(*_args: Any, **_kwargs: Any) -> CaseTools:
        raise Crash("the checkpointer's set-up failed")

    with pytest.raises(Crash):
        make_agent(app, model, tool_factory=broken).run_turn(
            case_id, "plan it", requester="U1", correlation_id="c", trigger="chat")
    model.turns.append(ai(content="on it"))
    agent = make_agent(app, model)
    agent.lock_wait_s = 0.0
    assert agent.converse(case_id, "and?", user="U1", correlation_id="c2") != \
        "Another agent run is working on this case right now; ask again in a moment."
