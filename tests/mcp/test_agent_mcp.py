"""External MCP tools for the agent: a local ticket desk (an MCP server written with the SDK)
offers a read tool and a write tool; the agent (scripted model) is offered only the read tool,
calls it through the gateway (an identical call in the same turn replays), and is refused the
write tool, which only a plan step may run."""

from __future__ import annotations

import json
from pathlib import Path

from langchain_core.messages import AIMessage, ToolMessage
from sqlalchemy import Engine, select

from agent.mcp_tools import McpToolbox, toolbox_from_settings
from agent.scripted import ScriptedChatModel
from core.db.tables import tool_call_ledger
from core.domain.fsm import CaseStatus
from core.mcp.remote import RemoteResult, RemoteServer, RemoteTool
from core.settings import Settings
from tests.support.agents import agent_app, ai, call, case_at, events, make_agent
from tests.support.ticket_desk import READ, WRITE, calls, desk_config


def tool_answers(model: ScriptedChatModel) -> list[ToolMessage]:
    return [m for m in model.seen[-1] if isinstance(m, ToolMessage)]


def test_the_agent_reads_through_the_gateway_and_is_refused_the_write_tool(
        engine: Engine, tmp_path: Path) -> None:
    log = tmp_path / "desk.jsonl"
    app = agent_app(engine, mcp_servers=str(desk_config(tmp_path, log)))
    case_id = case_at(app, CaseStatus.PLANNING, "payments queue stuck, ticket T-1")
    model = ScriptedChatModel(turns=[
        ai(call(READ, ticket="T-1"), call(READ, ticket="T-1")),
        ai(call(WRITE, worker="w1")),
        AIMessage(content="T-1 is open; restarting w1 needs an approved plan."),
    ])

    turn = make_agent(app, model).run_turn(case_id, "what does T-1 say?", requester="U1",
                                           correlation_id="c-1", trigger="chat")

    assert turn.outcome == "answered"
    first, again, refused = tool_answers(model)
    assert (first.status, again.status, refused.status) == ("success", "success", "error")
    assert json.loads(first.content)["status"] == "ok"
    assert json.loads(again.content)["status"] == "replayed"
    assert json.loads(first.content)["result"] == json.loads(again.content)["result"]
    assert "workers w1, w2 stuck" in json.loads(first.content)["result"]["text"]
    assert "approved plan" in json.loads(refused.content)["error"]
    # the desk saw the read once and the write never
    assert [c["tool"] for c in calls(log)] == ["lookup_ticket"]
    with engine.connect() as conn:
        ledger = conn.execute(select(tool_call_ledger.c.tool, tool_call_ledger.c.state)
                              .where(tool_call_ledger.c.tool.like("mcp.%"))).all()
    assert [tuple(row) for row in ledger] == [("mcp.desk.lookup_ticket", "done")]
    assert len(events(app, case_id, "agent_refused")) == 1


def test_only_allowed_read_only_tools_are_offered() -> None:
    server = RemoteServer(name="desk", command="unused", agent_tools=["lookup_ticket",
                                                                      "restart_worker"])
    listed = [RemoteTool("desk", "lookup_ticket", "read", {"type": "object"}, read_only=True),
              RemoteTool("desk", "restart_worker", "write", {"type": "object"},
                         read_only=False),
              RemoteTool("desk", "delete_all", "read?", {"type": "object"}, read_only=True)]
    toolbox = McpToolbox({"desk": server}, 1000, lister=lambda _s: listed)

    assert [s["function"]["name"] for s in toolbox.specs()] == [READ]
    assert toolbox.plan_only(WRITE) and not toolbox.plan_only(READ)
    assert not toolbox.plan_only("mcp__desk__delete_all")  # not configured at all


def test_a_result_over_the_limit_is_cut() -> None:
    server = RemoteServer(name="desk", command="unused", agent_tools=["lookup_ticket"])
    tool = RemoteTool("desk", "lookup_ticket", "", {"type": "object"}, read_only=True)
    toolbox = McpToolbox({"desk": server}, 300, lister=lambda _s: [tool],
                         caller=lambda *_a: RemoteResult(False, "x" * 5000, {"big": "y" * 5000}))

    answer = toolbox.call(toolbox.offered()[READ], {})

    assert len(answer["text"]) < 400 and "truncated" in answer["text"]
    assert "structured" not in answer and "over the limit" in answer["structured_omitted"]


def test_no_servers_configured_means_no_toolbox() -> None:
    assert toolbox_from_settings(Settings()) is None
