"""The standard agent scenarios (the JSON files in tests/scenarios/): an incident, the case's
status, the scripted model's turns and what must come out; and the case and app they run on.
Used by ``bench/agent.py`` (model calls and tokens per case) and by the agent tests, so the
benchmark imports no test module.

In a script, ``"$CASE"`` is the case id and ``"$TEMPLATE:<name>"`` a catalog plan."""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.messages import AIMessage
from langchain_core.messages.tool import ToolCall
from sqlalchemy import Engine

from agent.offline import OfflinePlannerModel
from agent.planner import AgentPlanner
from agent.runner import Agent
from agent.scripted import ScriptedChatModel
from agent.settings import AgentSettings
from core.bootstrap import App, bootstrap
from core.demo import DEMO_METRICS_AFTER_CHANGE
from core.domain.commands import OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.domain.plan_templates import load_template
from core.messaging.consumer import Delivery
from core.messaging.envelope import Envelope
from core.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests" / "scenarios"
RUNBOOKS = ROOT / "docs" / "runbooks"
REQUESTER = "sre@example"  # who opens the cases: the requester of tests/support/cases.py
_ids = itertools.count(1)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    severity: str
    status: CaseStatus
    request: str | None  # None: the planner consumer's request
    script: list[dict[str, Any]]
    expect: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    scenario: str
    model: str
    status: str
    plan: dict[str, Any] | None
    model_calls: int
    tokens_in: int
    tokens_out: int
    refused: int


def agent_app(engine: Engine, **overrides: Any) -> App:
    """The agent's app on ``engine``; its metrics source is the demo's stand-in table (there
    is no default: without a source, plan_ready refuses a plan with a metric check), and the
    runbook script ``restart-service`` is allowed (``bench/agent.py`` and the agent's tests put
    the demo's stand-in first on PATH)."""
    values: dict[str, Any] = {"runbooks_dir": str(RUNBOOKS),
                              "static_metrics": DEMO_METRICS_AFTER_CHANGE,
                              # the templates' runbook script, as the demo allows it: a plan
                              # that runs it passes its dry run when it is on PATH
                              "script_allowlist": ["restart-service"], **overrides}
    model = {name: values.pop(name) for name in list(values) if name in AgentSettings.model_fields}
    return bootstrap(Settings(**values).with_layers(AgentSettings(**model)), engine=engine)


def case_at(app: App, status: CaseStatus, title: str = "p95 latency after deploy of checkout"
            ) -> UUID:
    """A case opened by REQUESTER and moved to ``status`` (NEW, ANALYZING or PLANNING)."""
    reply = app.cases.open_case(OpenCase(title=title, actor=REQUESTER, severity="SEV2"),
                               uuid.uuid4().hex)
    case_id = UUID(reply.data()["case_id"])
    path = {CaseStatus.NEW: [], CaseStatus.ANALYZING: [CaseEvent.START_ANALYSIS],
            CaseStatus.PLANNING: [CaseEvent.START_ANALYSIS, CaseEvent.ANALYSIS_DONE]}[status]
    for event in path:
        app.cases.transition(TransitionCase(case_id, event, actor="test"), uuid.uuid4().hex).data()
    return case_id


def plan_delivery(app: App, case_id: UUID, message_id: int | None = None) -> Delivery:
    """The ``cmd.plan.generate`` delivery for the case as it is now."""
    case = app.cases.get_case(case_id)
    payload = {"case_id": str(case_id), "version": case["version"],
               "correlation_id": f"corr-{case_id}"}
    envelope = Envelope(message_id or next(_ids), Topic.PLAN_GENERATE, str(case_id), payload)
    return Delivery("planner", envelope)


def load_scenarios() -> list[Scenario]:
    scenarios = []
    for path in sorted(FOLDER.glob("*.json")):
        raw = json.loads(path.read_text("utf-8"))
        scenarios.append(Scenario(raw["name"], raw["title"], raw["severity"],
                                  CaseStatus(raw["status"]), raw.get("request"), raw["script"],
                                  raw["expect"]))
    return scenarios


def _fill(value: Any, case_id: UUID) -> Any:
    if value == "$CASE":
        return str(case_id)
    if isinstance(value, str) and value.startswith("$TEMPLATE:"):
        return load_template(value.removeprefix("$TEMPLATE:"))
    if isinstance(value, dict):
        return {k: _fill(v, case_id) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, case_id) for v in value]
    return value


def scripted_model(scenario: Scenario, case_id: UUID) -> ScriptedChatModel:
    turns = []
    for n, turn in enumerate(scenario.script):
        calls = [ToolCall(name=name, args=_fill(args, case_id), id=f"s{n}-{i}",
                          type="tool_call")
                 for i, (name, args) in enumerate(turn.get("tool_calls", []))]
        turns.append(AIMessage(content=turn.get("content", ""), tool_calls=calls))
    return ScriptedChatModel(turns=turns)


def run_scenario(engine: Engine, scenario: Scenario, model_kind: str = "scripted") -> Outcome:
    """Run one scenario on a fresh case with the scripted (or the offline planner) model."""
    app: App = agent_app(engine)
    case_id = case_at(app, scenario.status, scenario.title)
    model = (scripted_model(scenario, case_id) if model_kind == "scripted"
             else OfflinePlannerModel())
    agent = Agent(app, model=model, lock_wait_s=1.0)
    try:
        if scenario.request is None:
            AgentPlanner(app, agent).handle(plan_delivery(app, case_id))
        else:
            agent.converse(case_id, scenario.request, user="U-scenario",
                           correlation_id=uuid.uuid4().hex)
    finally:
        agent.close()
    timeline = app.cases.timeline(case_id)
    usage = [row["meta"]["context"] for row in timeline if row["event"] == "agent_usage"]
    stored = app.cases.proposed_plan(case_id)
    return Outcome(scenario.name, model_kind, app.cases.get_case(case_id)["status"],
                   None if stored is None else stored["plan"],
                   sum(u["model_calls"] for u in usage), sum(u["tokens_in"] for u in usage),
                   sum(u["tokens_out"] for u in usage),
                   sum(row["event"] == "agent_refused" for row in timeline))
