"""``mcp.call``: a mutating MCP tool runs only as a step of an approved plan. The agent, refused
the desk's write tool, proposes a plan with an ``mcp.call`` step; once a person approves it the
executor calls the tool through the gateway with the step's idempotency key in ``_meta``, exactly
once however often the step's command is delivered; the answer is on the timeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from sqlalchemy import Engine

from agent.scripted import ScriptedChatModel
from core.consumers.executor import Executor
from core.domain.commands import ApprovePlan
from core.domain.fsm import CaseStatus
from core.domain.messages import Topic
from core.domain.plans import plan_hash, plan_problems
from core.mcp.remote import RemoteResult, RemoteServer
from core.messaging.consumer import ConsumerRunner, Delivery
from core.steps.adapters.base import StepContext, StepRefused
from core.steps.adapters.mcp_call import McpCallAdapter
from tests.support.agents import agent_app, ai, call, case_at, make_agent
from tests.support.cases import APPROVER, APPROVERS, key
from tests.support.plan_runs import envelope_of, executing_case, fresh_copy, make_app, notes
from tests.support.ticket_desk import WRITE, calls, desk_config, desk_over_http


class Crash(Exception):
    """The executor's process dies after its steps ran, before the case moved."""


class CrashingExecutor(Executor):
    def _finish(self, *args: Any, **kwargs: Any) -> None:
        raise Crash("killed before the final transition")


def restart_plan(tool: str = "restart_worker") -> dict[str, Any]:
    return {"title": "Restart the stuck payments worker", "risk_score": 0.3,
            "steps": [{"action": "mcp.call", "timeout_s": 30, "retry": 0,
                       "params": {"server": "desk", "tool": tool,
                                  "arguments": {"worker": "w1"}}}],
            "rollback": {"steps": []},
            "verify": {"metric": "error_rate", "below": 0.01}}


def test_the_write_tool_runs_once_as_an_approved_plan_step(engine: Engine,
                                                           tmp_path: Path) -> None:
    log = tmp_path / "desk.jsonl"
    with desk_over_http(log) as url:
        config = desk_config(tmp_path, log, url=url)
        app = agent_app(engine, mcp_servers=str(config), approvers=sorted(APPROVERS))
        case_id = case_at(app, CaseStatus.PLANNING, "payments worker w1 stuck")
        plan = restart_plan()
        model = ScriptedChatModel(turns=[
            ai(call(WRITE, worker="w1")),
            ai(call("propose_plan", case_id=str(case_id), plan=plan)),
            AIMessage(content="Proposed restarting w1; it waits for approval."),
        ])
        make_agent(app, model).run_turn(case_id, "restart w1", requester="U1",
                                        correlation_id="c-2", trigger="chat")
        assert calls(log) == []  # refused to the agent; the plan waits at the gate
        assert app.cases.get_case(case_id)["status"] == CaseStatus.WAIT_GATE

        approved = app.cases.approve_plan(ApprovePlan(case_id, plan_hash(plan), APPROVER),
                                          key())
        assert approved.ok, approved.body
        envelope = envelope_of(engine, case_id, Topic.EXEC_RUN)
        with pytest.raises(Crash):
            CrashingExecutor(app).handle(Delivery("executor", envelope))
        runner = ConsumerRunner(app.engine, Executor(app), sleep=lambda _s: None)
        for delivered in (envelope, fresh_copy(envelope), envelope):
            runner.deliver(delivered)

    restarts = calls(log, "restart_worker")
    assert len(restarts) == 1 and restarts[0]["arguments"] == {"worker": "w1"}
    [result] = notes(app, case_id, "step_result")
    assert result["context"]["ok"] and result["context"]["action"] == "mcp.call"
    assert restarts[0]["idempotency_key"] == result["context"]["detail"]["idempotency_key"]
    assert restarts[0]["idempotency_key"].startswith("opsgate-step-")
    assert json.loads(result["context"]["output"])["restarted"] is True
    assert app.cases.get_case(case_id)["status"] == CaseStatus.VERIFYING


def test_a_tool_not_on_plan_tools_is_refused_and_nothing_is_called(engine: Engine,
                                                                   tmp_path: Path) -> None:
    log = tmp_path / "desk.jsonl"
    with desk_over_http(log) as url:
        app = make_app(engine, mcp_servers=str(desk_config(tmp_path, log, url=url)))
        case_id = executing_case(app, restart_plan("lookup_ticket"))
        runner = ConsumerRunner(app.engine, Executor(app), sleep=lambda _s: None)
        assert runner.deliver(envelope_of(engine, case_id, Topic.EXEC_RUN)) == "done"

    assert calls(log) == []
    [result] = notes(app, case_id, "step_result")
    assert result["context"]["refused"] == "step_refused"
    assert "plan_tools" in result["reason"]
    assert app.cases.get_case(case_id)["status"] == CaseStatus.PARKED


DESK = RemoteServer(name="desk", command="unused", plan_tools=["restart_worker"])
CTX = StepContext("case", "hash", 0, 1, "opsgate-step-abc", 30)


@pytest.mark.parametrize("params", [
    {"server": "desk", "tool": "restart_worker", "arguments": {}, "shell": "rm -rf /"},
    {"server": "Desk!", "tool": "restart_worker"},
    {"server": "desk", "tool": "restart worker"},
    {"server": "desk", "tool": "restart_worker", "arguments": ["w1"]},
    {"server": "tickets", "tool": "restart_worker"},
])
def test_params_outside_the_contract_or_the_allow_list_are_refused(params) -> None:
    called: list[Any] = []
    adapter = McpCallAdapter({"desk": DESK}, 4096,
                             call=lambda *a, **k: called.append(a) or RemoteResult(False, ""))

    with pytest.raises(StepRefused):
        adapter.run(params, CTX)
    assert called == []


def test_the_step_key_goes_downstream_and_a_tool_error_fails_the_step() -> None:
    seen: list[dict[str, Any]] = []

    def call(server, tool, arguments, **kwargs):
        seen.append({"tool": tool, "arguments": arguments, **kwargs})
        return RemoteResult(True, "worker w1 is not known")

    outcome = McpCallAdapter({"desk": DESK}, 4096, call=call).run(
        {"server": "desk", "tool": "restart_worker", "arguments": {"worker": "w1"}}, CTX)

    assert seen == [{"tool": "restart_worker", "arguments": {"worker": "w1"},
                     "meta": {"idempotencyKey": "opsgate-step-abc"}, "timeout_s": 30}]
    assert not outcome.ok and "reported an error" in outcome.summary
    assert outcome.output == "worker w1 is not known"


def test_the_plan_guard_accepts_mcp_call() -> None:
    assert plan_problems(restart_plan()) == []
