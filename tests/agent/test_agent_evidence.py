"""The agent works from the case's evidence (issue 9): the analyst's findings, similar verified
past cases and runbooks reach the model as a separate context message (the request text stays
as it was), the offline planner model proposes the plan that resolved the most similar verified
case — adapted to the new case and naming the case it learned from — and its findings summary
cites the analyst's findings (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import Field
from sqlalchemy import Engine

from agent.evidence import EVIDENCE_KEY, evidence_messages, learned_plan
from agent.offline import OfflinePlannerModel
from agent.planner import AgentPlanner
from agent.prompts import plan_request
from agent.scripted import ScriptedChatModel
from core.analysis.store import write_findings
from core.bootstrap import App
from core.db.database import transaction
from core.domain.commands import NoteCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plan_templates import load_template
from core.domain.plans import plan_hash
from core.library import Library
from tests.support.agents import agent_app, case_at, events, make_agent, plan_delivery
from tests.support.cases import REQUESTER, command, key

PAST_TITLE = "checkout p95 latency over 2 s after deploy of v2.3"
NEW_TITLE = "checkout p95 latency regression after deploy of v2.4"
PAST_PLAN: dict[str, Any] = {
    "title": "Roll checkout back to v2.2",
    "risk_score": 0.3,
    "steps": [{"action": "k8s.rollout", "timeout_s": 300, "retry": 1,
               "params": {"operation": "undo", "namespace": "prod", "deployment": "checkout"}}],
    "rollback": {"action": "noop"},
    "verify": {"checks": [{"metric": "latency_p95_ms", "below": 500, "for_s": 300}]},
}
FINDING = {"metric": "latency_p95_ms", "statistic": "shift", "baseline": 120.7,
           "current": 388.9, "change": 2.22, "confidence": 0.99,
           "summary": "latency_p95_ms stepped up 222%: 388.9 vs 120.7 before (z 41.9)",
           "query": "histogram_quantile(0.95, …)"}


class CountingOfflineModel(OfflinePlannerModel):
    """The offline planner model, counting the system messages of each prompt."""

    system_messages: list[int] = Field(default_factory=list)

    def decide(self, messages: Sequence[BaseMessage]) -> AIMessage:
        self.system_messages.append(sum(isinstance(m, SystemMessage) for m in messages))
        return super().decide(messages)


def closed_case(app: App, title: str = PAST_TITLE) -> UUID:
    """A case run to CLOSED (verified) with PAST_PLAN, indexed in the library."""
    case_id = case_at(app, CaseStatus.PLANNING, title)
    for event, extra in ((CaseEvent.PLAN_READY, {"plan": PAST_PLAN}),
                         (CaseEvent.GATE_APPROVED, {"plan_hash": plan_hash(PAST_PLAN)}),
                         (CaseEvent.EXEC_DONE, {})):
        assert app.cases.transition(command(case_id, event, **extra), key()).ok
    note = NoteCase(case_id, "verify_result", "verifier", reason="latency_p95_ms = 130, below 500",
                    meta={"state": "held", "passed": True, "series_read": True})
    app.cases.note(note, key()).data()
    assert app.cases.transition(command(case_id, CaseEvent.VERIFY_PASS), key()).ok
    assert Library(app.engine).index_case(case_id)
    return case_id


def with_finding(app: App, case_id: UUID) -> None:
    version = app.cases.get_case(case_id)["version"]
    with transaction(app.engine) as conn:
        write_findings(conn, case_id, version, [FINDING])


def test_planner_proposes_the_plan_of_the_most_similar_verified_case(engine: Engine) -> None:
    app = agent_app(engine)
    past = closed_case(app)
    case_id = case_at(app, CaseStatus.PLANNING, NEW_TITLE)
    model = OfflinePlannerModel()

    AgentPlanner(app, make_agent(app, model)).handle(plan_delivery(app, case_id))

    stored = app.cases.proposed_plan(case_id)
    assert stored is not None and app.cases.get_case(case_id)["status"] == "WAIT_GATE"
    plan = stored["plan"]
    assert plan["steps"] == PAST_PLAN["steps"]  # not the canary template the words pick
    assert plan["verify"] == PAST_PLAN["verify"] and plan["rollback"] == PAST_PLAN["rollback"]
    assert plan["title"] == (f"Roll checkout back to v2.2 for: {NEW_TITLE} "
                             f"(learned from case {str(past)[:8]})")
    assert stored["proposed_by"] == REQUESTER
    [ready] = [row for row in app.cases.timeline(case_id) if row["event"] == "plan_ready"]
    assert f"learned from case {str(past)[:8]}" in ready["reason"]


def test_the_evidence_is_a_context_message_beside_an_unchanged_request(engine: Engine) -> None:
    app = agent_app(engine)
    past = closed_case(app)
    case_id = case_at(app, CaseStatus.PLANNING, NEW_TITLE)
    with_finding(app, case_id)
    model = ScriptedChatModel(turns=[])
    request = plan_request(app.cases.get_case(case_id))

    make_agent(app, model).run_turn(case_id, request, requester=REQUESTER,
                                    correlation_id="c", trigger="planner")

    [prompt] = model.seen
    assert [type(m) for m in prompt] == [SystemMessage, SystemMessage, HumanMessage]
    assert prompt[2].content == request  # the words the offline model keys on are unchanged
    context = str(prompt[1].content)
    assert FINDING["summary"] in context and PAST_TITLE in context and str(past) in context
    assert "Roll checkout back to v2.2" in context and '"k8s.rollout"' in context
    data = prompt[1].additional_kwargs[EVIDENCE_KEY]
    assert data["best_plan"]["case_id"] == str(past) and data["findings"][0]["metric"] == (
        "latency_p95_ms")


def test_findings_summary_cites_the_findings_and_the_case_learned_from(engine: Engine) -> None:
    app = agent_app(engine)
    past = closed_case(app)
    case_id = case_at(app, CaseStatus.ANALYZING, NEW_TITLE)
    with_finding(app, case_id)
    agent = make_agent(app, OfflinePlannerModel())

    reply = agent.converse(case_id, "please propose a plan", user=REQUESTER, correlation_id="c")

    [done] = [row for row in app.cases.timeline(case_id)
              if (row["meta"] or {}).get("event") == "analysis_done"
              or row["event"] == "analysis_done"]
    assert FINDING["summary"] in done["reason"]
    assert f"learned from case {str(past)[:8]}" in done["reason"]
    assert f"learned from case {str(past)[:8]}" in reply and "approve" in reply
    stored = app.cases.proposed_plan(case_id)
    assert stored is not None and stored["plan"]["steps"] == PAST_PLAN["steps"]


def test_with_an_empty_library_the_template_plan_and_no_context_message(engine: Engine) -> None:
    app = agent_app(engine)
    case_id = case_at(app, CaseStatus.ANALYZING, NEW_TITLE)
    model = CountingOfflineModel()

    reply = make_agent(app, model).converse(case_id, "please propose a plan", user=REQUESTER,
                                            correlation_id="c")

    # the system prompt alone, every call (one of them finds no catalog)
    assert model.system_messages == [1, 1, 1, 1, 1]
    stored = app.cases.proposed_plan(case_id)
    assert stored is not None and stored["plan"] == load_template("k8s.rollout.canary")
    assert "learned from" not in reply
    [done] = [row for row in app.cases.timeline(case_id) if "Offline planner" in
              str(row["reason"])]
    assert "findings:" not in done["reason"] and "learned from" not in done["reason"]


def test_a_dissimilar_past_case_lends_no_plan(engine: Engine) -> None:
    app = agent_app(engine)
    closed_case(app, "TLS certificate expired on api gateway")
    case_id = case_at(app, CaseStatus.PLANNING, NEW_TITLE)

    make_agent(app, OfflinePlannerModel()).run_turn(
        case_id, plan_request(app.cases.get_case(case_id)), requester=REQUESTER,
        correlation_id="c", trigger="planner")

    stored = app.cases.proposed_plan(case_id)
    assert stored is not None and stored["plan"] == load_template("k8s.rollout.canary")
    assert not [e for e in events(app, case_id, "plan_ready") if "learned" in e["reason"]]


def test_a_learned_plan_names_only_the_case_it_was_learned_from() -> None:
    first = learned_plan({"best_plan": {"case_id": "c-1", "plan": PAST_PLAN}}, PAST_TITLE)
    assert first is not None
    again = learned_plan({"best_plan": {"case_id": "c-2", "plan": first}}, NEW_TITLE)

    assert again is not None
    assert again["title"] == f"Roll checkout back to v2.2 for: {NEW_TITLE} (learned from case c-2)"
    long = learned_plan({"best_plan": {"case_id": "c-3", "plan": PAST_PLAN}}, "x" * 400)
    assert long is not None and len(long["title"]) == 200
    assert long["title"].endswith("(learned from case c-3)")


def test_a_past_plan_that_fails_the_schema_is_not_learned() -> None:
    broken = {**PAST_PLAN, "steps": [{"action": "rm -rf", "timeout_s": 1, "retry": 9}]}

    assert learned_plan({"best_plan": {"case_id": "c-1", "plan": broken}}, NEW_TITLE) is None
    assert learned_plan({}, NEW_TITLE) is None
    assert evidence_messages(None) == [] and evidence_messages({}) == []
