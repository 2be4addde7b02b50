"""The real ``ChatOpenAI`` client against a local OpenAI-compatible stub server: tool calls run
through the gateway, a first attempt that times out is retried by the client without any side
effect happening twice, and an unreachable, slow or failing server leaves only a short note."""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI
from sqlalchemy import Engine

from agent.models import chat_model
from agent.offline import OfflinePlannerModel
from agent.runner import Agent
from agent.settings import AgentSettings
from core.bootstrap import App
from core.domain.fsm import CaseStatus
from core.domain.plan_templates import load_template
from tests.support.agents import agent_app, case_at, events, plans, timeline_count
from tests.support.openai_stub import StubTurn, chat_stub, tool_call
from tests.support.peers import free_port

NOOP = load_template("noop")


def openai_app(engine: Engine, base_url: str, **overrides: Any) -> App:
    settings: dict[str, Any] = {"model": "stub-model", "openai_api_key": "sk-test-not-real",
                                "openai_base_url": base_url, "model_timeout_s": 0.5,
                                "model_max_retries": 2, **overrides}
    return agent_app(engine, **settings)


def test_the_configured_model_is_chatopenai_with_explicit_limits() -> None:
    model = chat_model(AgentSettings(model="m", openai_api_key="k", openai_base_url="http://x/v1",
                                     model_timeout_s=7, model_max_retries=1))
    assert isinstance(model, ChatOpenAI)
    assert (model.request_timeout, model.max_retries) == (7, 1)
    assert model.use_responses_api is False
    assert isinstance(chat_model(AgentSettings(model="m")), OfflinePlannerModel)  # no key: offline
    assert isinstance(chat_model(AgentSettings()), OfflinePlannerModel)


def test_tool_calls_from_the_stub_run_once_despite_a_retried_timeout(engine: Engine) -> None:
    with chat_stub([]) as (stub, server):
        app = openai_app(engine, server.url("/v1"))
        case_id = case_at(app, CaseStatus.PLANNING)
        propose = tool_call("call_a", "propose_plan", case_id=str(case_id), plan=NOOP)
        first = StubTurn(tool_calls=(propose,), delay_s=1.5)  # past the 0.5 s timeout
        stub.turns.extend([
            first,
            StubTurn(tool_calls=(propose,)),  # the client's retry of the same request
            StubTurn(tool_calls=(  # the model repeats the intent with a new id, and posts
                tool_call("call_b", "propose_plan", case_id=str(case_id), plan=NOOP),
                tool_call("call_c", "add_note", case_id=str(case_id), text="Plan proposed.")),
                prompt_tokens=300),
            StubTurn(content="Proposed; a human must approve it.", prompt_tokens=400),
        ])

        reply = Agent(app).converse(case_id, "propose a plan", user="U1", correlation_id="c")

    assert reply == "Proposed; a human must approve it."
    assert len(stub.requests) == 4  # the timed-out attempt, its retry, two more turns
    assert stub.requests[0] == stub.requests[1]  # a retry of the very same request
    assert all(h["authorization"] == "Bearer sk-test-not-real" for h in stub.headers)
    first_request = stub.requests[0]
    assert first_request["model"] == "stub-model"
    assert {t["function"]["name"] for t in first_request["tools"]} == {
        "get_case", "list_cases", "case_timeline", "runbooks", "open_case",
        "record_findings", "propose_plan", "add_note", "name_components", "query_metrics",
        "list_metrics", "list_alerts", "kube_objects", "kube_events", "pod_logs",
        "rollout_history", "recent_changes", "plan_template", "find_components"}
    tool_turn = [m for m in stub.requests[3]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_turn] == ["call_a", "call_b", "call_c"]
    assert '"replayed"' in tool_turn[1]["content"]
    assert plans(engine, case_id) == 1
    assert app.cases.get_case(case_id)["status"] == "WAIT_GATE"
    assert app.chat.thread(str(case_id)) == ["Plan proposed."]  # type: ignore[attr-defined]
    [usage] = events(app, case_id, "agent_usage")
    context = usage["meta"]["context"]
    assert (context["model"], context["model_calls"]) == ("stub-model", 3)
    assert (context["tokens_in"], context["tokens_out"]) == (800, 60)


def test_malformed_arguments_from_the_server_are_answered(sqlite_engine: Engine) -> None:
    with chat_stub([]) as (stub, server):
        app = openai_app(sqlite_engine, server.url("/v1"))
        case_id = case_at(app, CaseStatus.PLANNING)
        stub.turns.extend([
            StubTurn(tool_calls=(("call_x", "propose_plan", '{"case_id": "' + str(case_id)
                                  + '", "plan": {"title": '),)),
            StubTurn(content="Sorry."),
        ])
        reply = Agent(app).converse(case_id, "plan", user="U1", correlation_id="c")

    assert reply == "Sorry."
    [asked] = [m for m in stub.requests[1]["messages"] if m["role"] == "assistant"]
    assert [c["id"] for c in asked["tool_calls"]] == ["call_x"]  # echoed back, as the API wants
    [answer] = [m for m in stub.requests[1]["messages"] if m["role"] == "tool"]
    assert answer["tool_call_id"] == "call_x" and "not valid JSON" in answer["content"]
    assert plans(sqlite_engine, case_id) == 0


def closed_port() -> int:
    """A port nothing listens on (free a moment ago, outside the ephemeral range)."""
    return free_port()


def assert_only_a_note(app: App, case_id: Any, reply: str, rows_before: int) -> None:
    assert "did not answer" in reply and "nothing was changed" in reply
    case = app.cases.get_case(case_id)
    assert (case["status"], case["version"]) == ("PLANNING", 2)
    assert [r["event"] for r in app.cases.timeline(case_id)[rows_before:]] == [
        "agent_unavailable", "agent_usage"]
    assert "sk-test-not-real" not in reply


def test_an_unreachable_server_leaves_a_short_note(sqlite_engine: Engine) -> None:
    app = openai_app(sqlite_engine, f"http://127.0.0.1:{closed_port()}/v1",
                     model_max_retries=0)
    case_id = case_at(app, CaseStatus.PLANNING)
    before = timeline_count(sqlite_engine, case_id)

    reply = Agent(app).converse(case_id, "plan", user="U1", correlation_id="c")

    assert_only_a_note(app, case_id, reply, before)


def test_a_server_slower_than_the_timeout_is_tried_exactly_1_plus_retries_times(
        sqlite_engine: Engine) -> None:
    with chat_stub([StubTurn(content="late", delay_s=1.0)]) as (stub, server):
        app = openai_app(sqlite_engine, server.url("/v1"), model_timeout_s=0.3,
                         model_max_retries=1)
        case_id = case_at(app, CaseStatus.PLANNING)
        before = timeline_count(sqlite_engine, case_id)
        reply = Agent(app).converse(case_id, "plan", user="U1", correlation_id="c")

    assert len(stub.requests) == 2
    assert_only_a_note(app, case_id, reply, before)


def test_a_server_answering_errors_leaves_a_short_note(sqlite_engine: Engine) -> None:
    with chat_stub([StubTurn(status=500)]) as (stub, server):
        app = openai_app(sqlite_engine, server.url("/v1"), model_max_retries=0)
        case_id = case_at(app, CaseStatus.PLANNING)
        before = timeline_count(sqlite_engine, case_id)
        reply = Agent(app).converse(case_id, "plan", user="U1", correlation_id="c")

    assert len(stub.requests) == 1
    assert_only_a_note(app, case_id, reply, before)
