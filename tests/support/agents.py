"""Helpers of the agent tests: an app on the test's database, cases at a status (both shared
with the agent benchmark, so they live in bench/scenarios.py), scripted tool calls, and row
counts that show whether anything was written."""

from __future__ import annotations

import itertools
from typing import Any
from uuid import UUID

from langchain_core.messages import AIMessage
from langchain_core.messages.tool import ToolCall, invalid_tool_call
from sqlalchemy import Engine, func, select

from agent.runner import Agent
from bench import scenarios
from bench.scenarios import case_at as case_at
from bench.scenarios import plan_delivery as plan_delivery
from core.bootstrap import App
from core.db.tables import case_timeline, plan_approved, plan_proposed
from tests.support.cases import APPROVERS

_ids = itertools.count(1)


def agent_app(engine: Engine, **overrides: Any) -> App:
    """The agent benchmark's app on ``engine``, with the tests' ``APPROVERS`` named (with none,
    nobody approves)."""
    return scenarios.agent_app(engine, **{"approvers": sorted(APPROVERS), **overrides})


def call(name: str, call_id: str | None = None, /, **args: Any) -> ToolCall:
    return ToolCall(name=name, args=args, id=call_id or f"call-{next(_ids)}", type="tool_call")


def ai(*calls: ToolCall, content: str = "", bad: list[dict[str, Any]] | None = None
       ) -> AIMessage:
    """A scripted model turn with ``calls`` (and malformed ones in ``bad``)."""
    invalid = [invalid_tool_call(name=b.get("name"), args=b.get("args"), id=b.get("id"),
                                 error=b.get("error")) for b in bad or []]
    return AIMessage(content=content, tool_calls=list(calls), invalid_tool_calls=invalid)


def count(engine: Engine, table: Any, case_id: UUID, **where: Any) -> int:
    query = select(func.count()).select_from(table).where(table.c.case_id == case_id)
    for column, value in where.items():
        query = query.where(table.c[column] == value)
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def plans(engine: Engine, case_id: UUID) -> int:
    return count(engine, plan_proposed, case_id)


def approvals(engine: Engine, case_id: UUID) -> int:
    return count(engine, plan_approved, case_id)


def events(app: App, case_id: UUID, event: str) -> list[dict[str, Any]]:
    return [row for row in app.cases.timeline(case_id) if row["event"] == event]


def timeline_count(engine: Engine, case_id: UUID) -> int:
    return count(engine, case_timeline, case_id)


def make_agent(app: App, model: Any, **kwargs: Any) -> Agent:
    return Agent(app, model=model, lock_wait_s=0.5, **kwargs)
