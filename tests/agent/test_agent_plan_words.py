"""What the agent is told about its own plan and what its runs cost: a verify check that already
holds before any change is told once, in propose_plan's answer (the plan still waits at the
gate); token counts a model did not report are marked as estimates on the timeline."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import ToolMessage
from sqlalchemy import Engine

from agent.scripted import ScriptedChatModel
from core.domain.fsm import CaseStatus
from core.domain.plan_templates import load_template
from tests.support.agents import agent_app, ai, call, case_at, make_agent

NOOP = load_template("noop")  # verify: http_5xx_ratio below 0.01; the stand-in reads 0.001


def answers(model: ScriptedChatModel) -> list[dict[str, Any]]:
    return [json.loads(str(m.content)) for m in model.seen[-1] if isinstance(m, ToolMessage)]


def test_a_check_that_holds_already_is_told_once_and_the_plan_still_waits(
        sqlite_engine: Engine) -> None:
    app = agent_app(sqlite_engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    propose = {"case_id": str(case_id), "plan": NOOP}
    model = ScriptedChatModel(turns=[ai(call("propose_plan", **propose)),
                                     ai(call("propose_plan", **propose)),
                                     ai(content="proposed")])
    make_agent(app, model).converse(case_id, "plan it", user="U1", correlation_id="c")

    first, again = answers(model)
    told = first["result"]["verify_note"]
    assert told.startswith("verify holds already before any change: check 1 "
                           "(http_5xx_ratio = 0.001 now, below 0.01)")
    assert "cannot show that the change worked" in told
    assert first["result"]["verify_now"] == [{"check": 0, "metric": "http_5xx_ratio",
                                              "now": 0.001, "holds_already": True,
                                              "stand_in": True}]
    assert again["status"] == "replayed" and again["result"] == first["result"]  # once
    assert app.cases.get_case(case_id)["status"] == "WAIT_GATE"  # marked, not refused


def test_a_check_that_does_not_hold_yet_says_nothing(sqlite_engine: Engine) -> None:
    app = agent_app(sqlite_engine, static_metrics={"http_5xx_ratio": 0.09})
    case_id = case_at(app, CaseStatus.PLANNING)
    model = ScriptedChatModel(turns=[ai(call("propose_plan", case_id=str(case_id), plan=NOOP)),
                                     ai(content="proposed")])
    make_agent(app, model).converse(case_id, "plan it", user="U1", correlation_id="c")
    [answer] = answers(model)
    assert "verify_note" not in answer["result"]


def test_estimated_tokens_are_said_to_be_estimates(sqlite_engine: Engine) -> None:
    app = agent_app(sqlite_engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    model = ScriptedChatModel(turns=[ai(content="looking")])
    make_agent(app, model).converse(case_id, "hi", user="U1", correlation_id="c")
    [usage] = [row for row in app.cases.timeline(case_id) if row["event"] == "agent_usage"]
    assert usage["reason"].startswith("1 model call(s), about ")
    assert "~" not in usage["reason"]  # Slack would strike "~58971 tokens in, ~648" through
    assert usage["reason"].endswith(" tokens out (estimated)")
    assert usage["meta"]["context"]["tokens_estimated"] is True
