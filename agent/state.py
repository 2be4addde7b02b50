"""The graph's state: the case thread's messages plus the counters one turn needs.

``usage`` accumulates over the whole thread (the case's totals); ``turn_model_calls``,
``invalid_plans`` and ``evidence`` (what the library knew about the case when the turn began,
``agent.evidence``) are reset by every new turn's input."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages


def add_usage(left: dict[str, int] | None, right: dict[str, int] | None) -> dict[str, int]:
    """Reducer: per-key sums of model calls and tokens."""
    total = dict(left or {})
    for name, value in (right or {}).items():
        total[name] = total.get(name, 0) + int(value)
    return total


class AgentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    case_id: str
    usage: Annotated[dict[str, int], add_usage]  # model_calls, tokens_in, tokens_out
    turn_model_calls: int
    invalid_plans: int
    evidence: dict[str, Any] | None
    stop: str | None  # why the turn ended early: "budget", "plan_invalid", "lost_lock"


def usage_of(state: dict[str, Any]) -> dict[str, int]:
    usage = state.get("usage") or {}
    return {name: int(usage.get(name, 0)) for name in ("model_calls", "tokens_in", "tokens_out")}
