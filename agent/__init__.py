"""The LangGraph agent: investigates a case, proposes schema-valid plans, and causes every side
effect through the gateway. It never executes or approves a plan (docs/agent.md).

The outer layers plug it in with ``consumers()`` (the agent planner replaces the template one)
and ``build_agent(app)`` (``converse`` for the chat front end)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from core.domain.messages import Topic

if TYPE_CHECKING:
    from agent.runner import Agent
    from core.bootstrap import App, ConsumerFactory
    from core.messaging.consumer import Consumer, Delivery

__all__ = ["build_agent", "consumers"]


def consumers() -> dict[str, ConsumerFactory]:
    """The consumers the agent provides, by the core name they replace."""
    return {"planner": PlannerOnFirstUse}


class PlannerOnFirstUse:
    """The agent planner (``agent.planner.AgentPlanner``), built when the first plan request
    arrives: importing LangChain takes seconds a starting process should not wait for."""

    name = "planner"
    topics: tuple[str, ...] = (Topic.PLAN_GENERATE,)

    def __init__(self, app: App) -> None:
        self.app = app
        self._planner: Consumer | None = None
        self._lock = threading.Lock()

    def handle(self, delivery: Delivery) -> None:
        with self._lock:
            if self._planner is None:
                from agent.planner import AgentPlanner

                self._planner = AgentPlanner(self.app)
        self._planner.handle(delivery)


def build_agent(app: App) -> Agent:
    """The agent of ``app``: ``converse(case_id, text, *, user, correlation_id) -> str``."""
    from agent.runner import Agent

    return Agent(app)
