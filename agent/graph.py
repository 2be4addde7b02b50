"""The agent's LangGraph: a model node and a tool node in a loop, one thread per case.

    START → model ⇄ tools → END

The model node calls the chat model with the system prompt, the case's evidence (a separate
context message, ``agent.evidence``) and the thread's messages, and counts the call and its
tokens. The tool node answers every tool call of the model's last message, in
order (parallel calls included, and malformed ones as errors), through ``CaseTools``. The loop
ends when the model answers without tool calls, runs out of model calls, or gives up on an
invalid plan after ``MAX_PLAN_REPAIRS`` repairs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agent import metrics
from agent.evidence import evidence_messages
from agent.prompts import system_prompt
from agent.replies import ToolReply
from agent.state import AgentState
from agent.tools import CaseTools
from agent.usage import ESTIMATED, model_name
from core.errors import InternalError

log = logging.getLogger(__name__)

MAX_PLAN_REPAIRS = 2  # after the first invalid plan, at most this many more tries
HISTORY_LIMIT = 40  # messages of earlier turns the model sees at most


class ModelUnavailable(InternalError):
    """The model could not answer (unreachable, too slow, erroring): the turn stops."""

    code = "model_unavailable"


class Node(Protocol):
    """A node of the graph: the state in, the state's update out."""

    def __call__(self, state: AgentState) -> dict[str, Any]: ...


@dataclass
class RunUsage:
    """Model calls and tokens of one run (the thread's totals live in the state)."""

    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    failures: list[str] = field(default_factory=list)
    estimated: bool = False  # a model reported no tokens of its own: the counts are estimates

    def as_dict(self) -> dict[str, int]:
        return {"model_calls": self.model_calls, "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out}

    def tokens_said(self) -> str:
        """"120 tokens in, 30 tokens out", or "about 120 tokens in, about 30 tokens out
        (estimated)" (in words: a ``~`` pair is strikethrough wherever the line is drawn)."""
        mark = "about " if self.estimated else ""
        said = f"{mark}{self.tokens_in} tokens in, {mark}{self.tokens_out} tokens out"
        return f"{said} (estimated)" if self.estimated else said


def build_graph(model: BaseChatModel, tools: CaseTools, checkpointer: BaseCheckpointSaver[Any],
                *, max_model_calls: int, usage: RunUsage,
                interrupt_before: list[str] | None = None) -> CompiledStateGraph[Any]:
    """The compiled graph of one run (its tools hold the run's lock and fence)."""
    call_model = _model_node(model, tools, max_model_calls, usage)
    call_tools = _tools_node(tools)
    builder = StateGraph(AgentState)
    builder.add_node("model", call_model)
    builder.add_node("tools", call_tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", _after_model, ["tools", END])
    builder.add_conditional_edges("tools", _after_tools, ["model", END])
    return builder.compile(checkpointer=checkpointer, interrupt_before=interrupt_before)


def _model_node(model: BaseChatModel, tools: CaseTools, max_model_calls: int,
                usage: RunUsage) -> Node:
    """The model node: one call with the prompt, the evidence and the recent thread, counted;
    a note instead once the turn has used its model calls."""
    bound = model.bind_tools(tools.specs())
    name = model_name(model)

    def call_model(state: AgentState) -> dict[str, Any]:
        calls = state.get("turn_model_calls", 0)
        if calls >= max_model_calls:
            note = f"I stopped after {calls} model calls in this turn without finishing."
            return {"messages": [AIMessage(content=note)], "stop": "budget"}
        tools.renew()  # a slow model must not let the lease lapse mid-turn
        prompt: list[BaseMessage] = [SystemMessage(system_prompt(state["case_id"])),
                                     *evidence_messages(state.get("evidence")),
                                     *recent(state["messages"])]
        reply = _invoke(bound, prompt, name, usage)
        counted = _count(reply, name, usage)
        return {"messages": [reply], "usage": counted, "turn_model_calls": calls + 1}

    return call_model


def _tools_node(tools: CaseTools) -> Node:
    """The tool node: answers the last message's tool calls; stops the turn, with a note on the
    case, once the plan has failed the schema more than ``MAX_PLAN_REPAIRS`` repairs allow."""

    def call_tools(state: AgentState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        answers, invalid = _answer(tools, last, state.get("invalid_plans", 0))
        update: dict[str, Any] = {"messages": answers, "invalid_plans": invalid}
        if invalid > MAX_PLAN_REPAIRS:
            tools.note("plan_invalid",
                       f"the agent's plan failed the ChangePlan schema {invalid} times; the case "
                       "stays in PLANNING for a human or a new request",
                       {"attempts": invalid}, key=f"plan_invalid:{tools.case_id}:"
                       f"{last.id or len(state['messages'])}")
            update["stop"] = "plan_invalid"
        return update

    return call_tools


def recent(messages: list[AnyMessage], limit: int = HISTORY_LIMIT) -> list[AnyMessage]:
    """The thread's messages the model sees: from the earliest human turn whose tail fits in
    ``limit`` messages (the current turn whole, however long), so a long-lived case thread
    does not grow every prompt and no tool answer loses the call it answers."""
    starts = [n for n, m in enumerate(messages) if isinstance(m, HumanMessage)]
    fitting = [n for n in starts if len(messages) - n <= limit]
    if fitting:
        return messages[fitting[0]:]
    return messages[starts[-1]:] if starts else messages


def _invoke(bound: Any, prompt: list[BaseMessage], name: str, usage: RunUsage) -> AIMessage:
    started = time.perf_counter()
    try:
        reply = bound.invoke(prompt)
    except Exception as exc:  # the model's boundary: any failure ends the turn with a note
        metrics.MODEL_CALLS.labels(model=name, outcome="error").inc()
        usage.failures.append(f"{type(exc).__name__}: {exc}"[:300])
        log.warning("agent: the model %s failed: %s", name, usage.failures[-1])
        raise ModelUnavailable(usage.failures[-1]) from exc
    finally:
        metrics.MODEL_SECONDS.labels(model=name).observe(time.perf_counter() - started)
    if not isinstance(reply, AIMessage):
        raise ModelUnavailable(f"the model answered {type(reply).__name__}, not a message")
    return reply


def _count(reply: AIMessage, name: str, usage: RunUsage) -> dict[str, int]:
    tokens = reply.usage_metadata or {"input_tokens": 0, "output_tokens": 0,
                                      "total_tokens": 0}
    tokens_in, tokens_out = int(tokens["input_tokens"]), int(tokens["output_tokens"])
    usage.model_calls += 1
    usage.estimated = usage.estimated or bool(reply.response_metadata.get(ESTIMATED)) \
        or reply.usage_metadata is None
    usage.tokens_in += tokens_in
    usage.tokens_out += tokens_out
    metrics.MODEL_CALLS.labels(model=name, outcome="ok").inc()
    metrics.MODEL_TOKENS.labels(model=name, direction="in").inc(tokens_in)
    metrics.MODEL_TOKENS.labels(model=name, direction="out").inc(tokens_out)
    return {"model_calls": 1, "tokens_in": tokens_in, "tokens_out": tokens_out}


def _answer(tools: CaseTools, message: AIMessage, invalid: int) -> tuple[list[ToolMessage], int]:
    """One ToolMessage per tool call of ``message`` (valid ones in order, then malformed)."""
    answers: list[ToolMessage] = []
    for call in message.tool_calls:
        reply = tools.call(call["name"], call["args"])
        invalid += reply.invalid_plan
        answers.append(_tool_message(reply, call.get("id"), call["name"], len(answers)))
    for bad in message.invalid_tool_calls:
        reply = tools.malformed(bad.get("name"), bad.get("args"), bad.get("error"))
        answers.append(_tool_message(reply, bad.get("id"), bad.get("name"), len(answers)))
    return answers, invalid


def _tool_message(reply: ToolReply, call_id: str | None, name: str | None,
                  n: int) -> ToolMessage:
    return ToolMessage(content=reply.content, tool_call_id=call_id or f"call-without-id-{n}",
                       name=name or "unknown", status="success" if reply.ok else "error")


def _after_model(state: AgentState) -> Literal["tools", "__end__"]:
    last = state["messages"][-1]
    wants = isinstance(last, AIMessage) and bool(last.tool_calls or last.invalid_tool_calls)
    return "tools" if wants and not state.get("stop") else "__end__"


def _after_tools(state: AgentState) -> Literal["model", "__end__"]:
    return "__end__" if state.get("stop") else "model"
