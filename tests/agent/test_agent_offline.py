"""The offline planner model drives the same graph the real model does: the agent planner turns
``cmd.plan.generate`` into a proposed template plan through the gateway, with its checkpoints in
the application's own database and its model calls on the timeline (SQLite and PostgreSQL)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from prometheus_client import REGISTRY
from sqlalchemy import Engine, inspect, text

import agent
from agent.checkpoints import open_checkpoints
from agent.offline import OfflinePlannerModel
from agent.planner import AgentPlanner
from core.bootstrap import Extensions
from core.consumers import build_consumers
from core.domain.fsm import CaseStatus
from core.domain.plan_templates import load_template
from core.loop import InProcessLoop
from core.messaging.consumer import ConsumerRunner
from tests.support.agents import (
    agent_app,
    approvals,
    case_at,
    events,
    make_agent,
    plan_delivery,
    plans,
)
from tests.support.cases import REQUESTER


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_planner_proposes_the_matching_template_through_the_graph(engine: Engine) -> None:
    calls_before = sample("agent_model_calls_total", model="offline-planner", outcome="ok")
    tokens_before = sample("agent_model_tokens_total", model="offline-planner", direction="in")
    app = agent_app(engine)
    case_id = case_at(app, CaseStatus.PLANNING, "p95 latency regression after deploy")
    planner = AgentPlanner(app, make_agent(app, OfflinePlannerModel()))
    runner = ConsumerRunner(engine, planner, max_attempts=1)
    delivery = plan_delivery(app, case_id)

    assert runner.deliver(delivery.envelope) == "done"
    assert runner.deliver(delivery.envelope) == "duplicate"  # the inbox saw it

    case = app.cases.get_case(case_id)
    assert (case["status"], case["version"]) == ("WAIT_GATE", 3)
    stored = app.cases.proposed_plan(case_id)
    assert stored is not None and stored["plan"] == load_template("k8s.rollout.canary")
    assert stored["proposed_by"] == REQUESTER  # the opener asked; they cannot approve it
    assert plans(engine, case_id) == 1 and approvals(engine, case_id) == 0
    [usage] = events(app, case_id, "agent_usage")
    context = usage["meta"]["context"]
    # get_case and runbooks; find_components (no catalog here: the template as written);
    # propose_plan; the answer
    assert context["model"] == "offline-planner" and context["model_calls"] == 4
    assert context["tokens_in"] > context["tokens_out"] > 0
    assert context["case_total"]["model_calls"] == 4
    assert sample("agent_model_calls_total", model="offline-planner",
                  outcome="ok") == calls_before + 4
    assert sample("agent_model_tokens_total", model="offline-planner",
                  direction="in") == tokens_before + context["tokens_in"]


def test_a_stale_command_starts_no_turn(engine: Engine) -> None:
    app = agent_app(engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    model = OfflinePlannerModel()
    planner = AgentPlanner(app, make_agent(app, model))
    old = plan_delivery(app, case_id)
    planner.handle(plan_delivery(app, case_id))
    before = app.cases.timeline(case_id)

    planner.handle(old)  # another message for the version the case has left

    assert app.cases.timeline(case_id) == before


def test_checkpoints_live_in_the_applications_database(engine: Engine) -> None:
    app = agent_app(engine)
    case_id = case_at(app, CaseStatus.PLANNING)
    assistant = make_agent(app, OfflinePlannerModel())
    reply = assistant.converse(case_id, "what is going on?", user="U1", correlation_id="c-1")

    assert "PLANNING" in reply
    assert {"checkpoints", "checkpoint_writes" if engine.dialect.name == "postgresql"
            else "writes"} <= set(inspect(engine).get_table_names())
    with engine.connect() as conn:
        threads = conn.execute(text("select distinct thread_id from checkpoints")).scalars().all()
    assert threads == [f"case:{case_id}"]
    assistant.close()


def test_converse_on_an_analysed_case_records_findings_then_proposes(engine: Engine) -> None:
    app = agent_app(engine)
    case_id = case_at(app, CaseStatus.ANALYZING, "checkout pods OOM killed, memory leak")
    assistant = make_agent(app, OfflinePlannerModel())

    reply = assistant.converse(case_id, "please propose a plan", user="U2", correlation_id="c-2")

    assert "waits at the gate" in reply
    assert [row["event"] for row in app.cases.timeline(case_id)][-3:] == [
        "analysis_done", "plan_ready", "agent_usage"]
    stored = app.cases.proposed_plan(case_id)
    assert stored is not None and stored["plan"] == load_template("script.restart")
    assert stored["proposed_by"] == "U2"


def test_the_plugged_in_agent_planner_runs_in_the_closed_loop(sqlite_engine: Engine) -> None:
    """``agent.consumers()`` replaces the core planner by name; in the in-process loop the
    planner consumes ``cmd.plan.generate`` from the relay (only it is subscribed here, so the
    test does not depend on the other consumers)."""
    app = agent_app(sqlite_engine)
    app.extensions = Extensions(consumers=agent.consumers())
    planner = next(c for c in build_consumers(app) if c.name == "planner")
    assert isinstance(planner, agent.PlannerOnFirstUse)  # the AgentPlanner, built on first use
    case_id = case_at(app, CaseStatus.PLANNING, "region us-east down, fail over traffic")

    with InProcessLoop(app, [planner]) as loop:
        moved = loop.wait_for(
            lambda: app.cases.get_case(case_id)["status"] == "WAIT_GATE", timeout_s=20)

    assert moved, app.cases.timeline(case_id)
    stored = app.cases.proposed_plan(case_id)
    assert stored is not None and stored["plan"] == load_template("gateway.flip.failover")
    assert approvals(sqlite_engine, case_id) == 0  # risk 0.7: two humans, never the agent


def test_checkpoint_setup_is_safe_when_processes_start_together(pg_engine: Engine) -> None:
    """N consumers starting at once each set the checkpointer up: one at a time, none fails,
    and none waits on other transactions of the database (no CREATE INDEX CONCURRENTLY)."""
    with ThreadPoolExecutor(4) as pool:
        opened = list(pool.map(lambda _: open_checkpoints(pg_engine), range(4)))
    for checkpoints in opened:
        checkpoints.close()
    with pg_engine.connect() as conn:
        versions = conn.execute(text("select count(*) from checkpoint_migrations")).scalar_one()
    assert versions == len(opened[0].saver.MIGRATIONS)  # type: ignore[attr-defined]


def test_a_refused_proposal_is_said_in_sentences_not_json():
    from agent.offline import refusal_in_words
    from core.domain.verify import NO_METRICS_SOURCE
    from core.errors import GuardFailed

    metric = GuardFailed(f"the plan's metric check cannot be judged: {NO_METRICS_SOURCE}",
                         problems=[f"plan.verify: {NO_METRICS_SOURCE}"]).to_body()["error"]
    said = refusal_in_words(metric)
    assert "{" not in said and "guard_failed" not in said
    assert said.count(NO_METRICS_SOURCE[:40]) == 1
    assert said.startswith("the plan's metric check cannot be judged: no metrics source")
    invalid = GuardFailed("the plan is incomplete or invalid",
                          problems=["steps: empty", "title: missing"]).to_body()["error"]
    invalid = refusal_in_words(invalid)
    assert invalid == "the plan is incomplete or invalid: steps: empty; title: missing."
    long = refusal_in_words({"code": "guard_failed", "message": "word " * 100})
    assert len(long) <= 300 and long.endswith("…") and " wor…" not in long
