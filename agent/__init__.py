"""The LangGraph agent: investigates a case, proposes schema-valid plans, and causes every side
effect through the gateway. It never executes or approves a plan (docs/agent.md).

The outer layers plug it in with ``consumers()`` (the agent planner replaces the template one)
and ``build_agent(app)`` (``converse`` for the chat front end)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.runner import Agent
    from core.bootstrap import App, ConsumerFactory

__all__ = ["build_agent", "consumers"]


def consumers() -> dict[str, ConsumerFactory]:
    """The consumers the agent provides, by the core name they replace."""
    from agent.planner import AgentPlanner

    return {"planner": AgentPlanner}


def build_agent(app: App) -> Agent:
    """The agent of ``app``: ``converse(case_id, text, *, user, correlation_id) -> str``."""
    from agent.runner import Agent

    return Agent(app)
