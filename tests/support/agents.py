"""Helpers of the agent tests: an app on the test's database, cases at a status, scripted tool
calls, and row counts that show whether anything was written."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.messages import AIMessage
from langchain_core.messages.tool import ToolCall, invalid_tool_call
from sqlalchemy import Engine, func, select

from agent.runner import Agent
from core.bootstrap import App, bootstrap
from core.db.tables import case_timeline, plan_approved, plan_proposed
from core.domain.commands import OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.messaging.consumer import Delivery
from core.messaging.envelope import Envelope
from core.settings import Settings
from tests.support.cases import REQUESTER, key

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"
_ids = itertools.count(1)


def agent_app(engine: Engine, **overrides: Any) -> App:
    settings = Settings(runbooks_dir=str(RUNBOOKS), **overrides)
    return bootstrap(settings, engine=engine)


def case_at(app: App, status: CaseStatus, title: str = "p95 latency after deploy of checkout"
            ) -> UUID:
    """A case opened by REQUESTER and moved to ``status`` (NEW, ANALYZING or PLANNING)."""
    reply = app.cases.open_case(OpenCase(title=title, actor=REQUESTER, severity="SEV2"), key())
    case_id = UUID(reply.data()["case_id"])
    path = {CaseStatus.NEW: [], CaseStatus.ANALYZING: [CaseEvent.START_ANALYSIS],
            CaseStatus.PLANNING: [CaseEvent.START_ANALYSIS, CaseEvent.ANALYSIS_DONE]}[status]
    for event in path:
        app.cases.transition(TransitionCase(case_id, event, actor="test"), key()).data()
    return case_id


def plan_delivery(app: App, case_id: UUID, message_id: int | None = None) -> Delivery:
    """The ``cmd.plan.generate`` delivery for the case as it is now."""
    case = app.cases.get_case(case_id)
    payload = {"case_id": str(case_id), "version": case["version"],
               "correlation_id": f"corr-{case_id}"}
    envelope = Envelope(message_id or next(_ids), Topic.PLAN_GENERATE, str(case_id), payload)
    return Delivery("planner", envelope)


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
