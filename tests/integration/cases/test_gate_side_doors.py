"""The red team's ways around the gate, through the real case service, gatekeeper, executor and
REST API on SQLite and PostgreSQL: a rollback holding both a noop list and a script, and a NaN
risk score. Each plan would run a script that leaves a file behind; the file never appears."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select, update
from sqlalchemy.exc import SQLAlchemyError

from core.api import create_api
from core.api.statuses import reply_status
from core.bootstrap import App
from core.consumers.executor import Executor
from core.consumers.gatekeeper import Gatekeeper
from core.db.tables import case_timeline, plan_proposed
from core.domain.commands import ApprovePlan
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.domain.plans import StepAction, parsed_or_none, plan_hash
from core.messaging.consumer import Delivery
from core.messaging.envelope import Envelope
from core.steps.adapters import StepContext, StepOutcome
from core.steps.runner import StepRunner
from tests.support.cases import PLAN, command, key, open_case
from tests.support.plan_runs import envelope_of
from tests.support.plan_shapes import plan_shapes

E, S = CaseEvent, CaseStatus


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where the red team's script would leave its mark."""
    return tmp_path / "the-script-ran"


@pytest.fixture
def touch(tmp_path: Path) -> Path:
    path = tmp_path / "leave-a-mark.sh"
    path.write_text('#!/bin/sh\ntouch "$1"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def app_options(touch: Path) -> dict[str, Any]:
    """Automatic approval of noop-only plans, and the script on the allow-list: all that stands
    between a plan and the script is the gate."""
    return {"auto_approve": "noop_only", "script_allowlist": [str(touch)]}


def red_team_rollback(touch: Path, marker: Path) -> dict[str, Any]:
    """A noop step that fails (unknown param), and a rollback the old policy read as its
    ``steps`` (noop) while the old executor ran its ``action`` (the script)."""
    return {
        "title": "Observe checkout", "risk_score": 0.0,
        "steps": [{"action": "noop", "params": {"bogus": True}, "timeout_s": 10, "retry": 0}],
        "rollback": {"steps": [{"action": "noop"}], "action": "script.exec",
                     "params": {"argv": [str(touch), str(marker)]}},
        "verify": {"metric": "error_rate", "below": 0.01},
    }


def nan_risk(touch: Path, marker: Path) -> dict[str, Any]:
    return {"title": "Restart checkout", "risk_score": float("nan"),
            "steps": [{"action": "script.exec", "params": {"argv": [str(touch), str(marker)]},
                       "timeout_s": 10, "retry": 0}],
            "rollback": {"action": "noop"}, "verify": {"metric": "error_rate", "below": 0.01}}


def planning(app: App) -> UUID:
    case_id = open_case(app.cases)
    for move in (E.START_ANALYSIS, E.ANALYSIS_DONE):
        assert app.cases.transition(command(case_id, move), key()).ok
    return case_id


def status(app: App, case_id: UUID) -> str:
    return str(app.cases.get_case(case_id)["status"])


def timeline_rows(engine: Engine, case_id: UUID) -> int:
    with engine.connect() as conn:
        return len(conn.execute(select(case_timeline.c.id).where(
            case_timeline.c.case_id == case_id)).all())


def stored_before_this_check(engine: Engine, case_id: UUID, plan: dict[str, Any]) -> str:
    """Make the plan the case waits on ``plan``, as an opsgate with the old, lenient reading
    would have stored it; returns its hash."""
    digest = plan_hash(plan)
    with engine.begin() as conn:
        conn.execute(update(plan_proposed).where(plan_proposed.c.case_id == case_id)
                     .values(plan=plan, plan_hash=digest))
    return digest


def gate_eval_for(engine: Engine, case_id: UUID, digest: str) -> Delivery:
    real = envelope_of(engine, case_id, Topic.GATE_EVAL)
    envelope = Envelope(real.message_id + 1_000_000, real.topic, real.key,
                        {**real.payload, "plan_hash": digest})
    return Delivery(Gatekeeper.name, envelope)


# -- the rollback with both shapes -------------------------------------------------------------


def test_the_rollback_with_both_shapes_is_refused_at_the_guard(app, engine, touch, marker):
    case_id = planning(app)
    reply = app.cases.transition(
        command(case_id, E.PLAN_READY, plan=red_team_rollback(touch, marker)), key())
    assert reply_status(reply) == 422 and json.loads(reply.body)["error"]["code"] == "guard_failed"
    problems = json.loads(reply.body)["error"]["details"]["problems"]
    assert any(p.startswith('plan.rollback: has both "action" and "steps"') for p in problems)
    assert status(app, case_id) == S.PLANNING and app.cases.proposed_plan(case_id) is None
    with TestClient(create_api(app), base_url="http://localhost") as client:
        answer = client.patch(f"/case/{case_id}/transition",
                              json={"event": "plan_ready", "actor": "sre@example",
                                    "plan": red_team_rollback(touch, marker)},
                              headers={"Idempotency-Key": uuid4().hex})
    assert answer.status_code == 422 and "has both" in answer.text
    assert status(app, case_id) == S.PLANNING and not marker.exists()


def test_such_a_plan_stored_before_is_neither_approved_nor_run(app, engine, touch, marker):
    case_id = planning(app)
    assert app.cases.transition(command(case_id, E.PLAN_READY, plan=PLAN), key()).ok
    digest = stored_before_this_check(engine, case_id, red_team_rollback(touch, marker))

    Gatekeeper(app).handle(gate_eval_for(engine, case_id, digest))
    assert status(app, case_id) == S.WAIT_GATE, "the gatekeeper must not approve it"
    [waiting] = [row for row in app.cases.timeline(case_id)
                 if row["event"] == "awaiting_approval"]
    assert "two distinct approvers" in waiting["reason"]
    for person in ("lead@example", "oncall@example"):
        refused = app.cases.approve_plan(ApprovePlan(case_id, digest, person), key())
        assert reply_status(refused) == 422 and "ChangePlan schema" in refused.body
    assert status(app, case_id) == S.WAIT_GATE and not marker.exists()


def test_the_executor_runs_nothing_of_a_stored_plan_it_cannot_read(app, engine, touch,
                                                                   marker):
    case_id = planning(app)
    assert app.cases.transition(command(case_id, E.PLAN_READY, plan=PLAN), key()).ok
    app.cases.approve_plan(ApprovePlan(case_id, plan_hash(PLAN), "lead@example"), key()).data()
    assert status(app, case_id) == S.EXECUTING
    digest = stored_before_this_check(engine, case_id, red_team_rollback(touch, marker))
    real = envelope_of(engine, case_id, Topic.EXEC_RUN)
    run = Envelope(real.message_id + 1_000_000, real.topic, real.key,
                   {**real.payload, "plan_hash": digest})

    Executor(app).handle(Delivery(Executor.name, run))

    assert status(app, case_id) == S.PARKED and not marker.exists()
    [parked] = [row for row in app.cases.timeline(case_id) if row["event"] == "exec_failed"]
    assert "the approved plan is invalid" in parked["reason"] and "nothing ran" in \
        parked["reason"]
    assert not [row for row in app.cases.timeline(case_id)
                if row["event"] in ("step_result", "rollback_result")]


# -- NaN for a risk score ----------------------------------------------------------------------


def test_a_nan_risk_is_refused_by_the_guard(app, touch, marker):
    case_id = planning(app)
    reply = app.cases.transition(command(case_id, E.PLAN_READY, plan=nan_risk(touch, marker)),
                                 key())
    assert reply_status(reply) == 422
    assert json.loads(reply.body)["error"]["details"]["problems"] == [
        "plan.risk_score: nan is not a number JSON allows (NaN and Infinity are refused)"]
    assert status(app, case_id) == S.PLANNING and not marker.exists()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_the_rest_api_refuses_json_with_nan_or_infinity_before_anything_reads_it(
        app, engine, touch, marker, constant):
    case_id = planning(app)
    rows = timeline_rows(engine, case_id)
    plan = json.dumps({**nan_risk(touch, marker), "risk_score": 0.1})
    body = json.dumps({"event": "plan_ready", "actor": "sre@example", "plan": "PLAN"}).replace(
        '"PLAN"', plan.replace('"risk_score": 0.1', f'"risk_score": {constant}'))
    with TestClient(create_api(app), base_url="http://localhost") as client:
        answer = client.patch(f"/case/{case_id}/transition", content=body,
                              headers={"Idempotency-Key": uuid4().hex,
                                       "Content-Type": "application/json"})
        created = client.post("/case/create", content='{"title": "x", "meta": {"n": NaN}}',
                              headers={"Idempotency-Key": uuid4().hex})
    for refused in (answer, created):
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "invalid_request" and "is not a number JSON allows" in \
            error["message"]
    assert status(app, case_id) == S.PLANNING and timeline_rows(engine, case_id) == rows
    assert not marker.exists()


def test_a_nan_plan_stored_before_is_approved_by_nobody(app, engine, touch, marker):
    case_id = planning(app)
    assert app.cases.transition(command(case_id, E.PLAN_READY, plan=PLAN), key()).ok
    plan = nan_risk(touch, marker)
    if engine.dialect.name == "postgresql":
        with pytest.raises(SQLAlchemyError):  # JSON in PostgreSQL has no NaN: no such row
            stored_before_this_check(engine, case_id, plan)
        return
    digest = stored_before_this_check(engine, case_id, plan)
    Gatekeeper(app).handle(gate_eval_for(engine, case_id, digest))
    for person in ("lead@example", "oncall@example"):  # one yes used to be enough
        refused = app.cases.approve_plan(ApprovePlan(case_id, digest, person), key())
        assert reply_status(refused) == 422, refused.body
    assert status(app, case_id) == S.WAIT_GATE and not marker.exists()


# -- every shape, through the real gate ------------------------------------------------------


class RecordingAdapter:
    """Stands where an action's adapter is: records the call, never touches anything."""

    def __init__(self, action: str, ran: list[str], ok: bool) -> None:
        self.action, self.ran, self.ok = action, ran, ok

    def run(self, params: Any, ctx: StepContext) -> StepOutcome:
        self.ran.append(self.action)
        return StepOutcome(self.ok, f"{self.action}: recorded")


@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=plan_shapes(), steps_fail=st.booleans())
def test_through_the_real_gate_an_automatic_approval_only_ever_runs_noop(app, engine, plan,
                                                                         steps_fail):
    """Guard, gatekeeper (``noop_only``) and executor as the loop runs them, with recording
    adapters: whatever the gate lets through on its own runs nothing but ``noop``."""
    case_id = planning(app)
    proposed = app.cases.transition(command(case_id, E.PLAN_READY, plan=plan), key())
    if not proposed.ok:
        event("refused by the guard")
        refused = parsed_or_none(plan)  # not a ChangePlan, or a step its dry run says cannot run
        dry_run = app.cases.dry_run
        assert reply_status(proposed) == 422
        assert refused is None or (dry_run is not None and dry_run(refused).refused)
        return
    Gatekeeper(app).handle(Delivery(Gatekeeper.name,
                                    envelope_of(engine, case_id, Topic.GATE_EVAL)))
    parsed = parsed_or_none(plan)
    assert parsed is not None
    if status(app, case_id) != S.EXECUTING:
        event("waits for people")
        assert status(app, case_id) == S.WAIT_GATE and not parsed.noop_only
        return
    event("approved by the gatekeeper")
    ran: list[str] = []
    executor = Executor(app)
    executor.steps = StepRunner(app.gateway, app.cases, {
        action.value: RecordingAdapter(action.value, ran, ok=not steps_fail)
        for action in StepAction}, lease_s=30.0)
    executor.handle(Delivery(Executor.name, envelope_of(engine, case_id, Topic.EXEC_RUN)))
    assert ran and set(ran) == {"noop"}, (plan, ran)
    assert status(app, case_id) == (S.PARKED if steps_fail else S.VERIFYING)
