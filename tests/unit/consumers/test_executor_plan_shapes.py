"""The executor against every plan shape a model could produce: it runs only what the parser read
(the reading the approval policy judged), so whatever the automatic approval lets through can
only ever run ``noop``, in steps and rollback alike. Also the lease of a step."""

from __future__ import annotations

import math
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, example, find, given, settings

from core.consumers.executor import Executed, execute
from core.consumers.runs import CommandRun
from core.domain.fsm import CaseEvent
from core.domain.plans import (
    ROLLBACK_RETRY,
    ROLLBACK_TIMEOUT_S,
    PlanStep,
    parsed_or_none,
    plan_hash,
)
from core.domain.policy import ApprovalPolicy
from core.steps.runner import Attempt, StepResult, step_lease_s
from tests.support.plan_shapes import plan_shapes

NOOP = {"action": "noop", "params": {"note": "undo"}}
POLICIES = [ApprovalPolicy(auto_approve="noop_only"),
            ApprovalPolicy(auto_approve="low_risk", auto_approve_max_risk=0.3)]


class RecordingRunner:
    """Stands where the gateway and the adapters are: records each step the executor hands
    over. Plan steps fail when ``fail_steps`` (so the rollback runs); rollback steps succeed."""

    def __init__(self, fail_steps: bool) -> None:
        self.fail_steps = fail_steps
        self.ran: list[PlanStep] = []

    def run(self, run: CommandRun, step: PlanStep) -> StepResult:
        self.ran.append(step)
        ok = step.phase == "rollback" or not self.fail_steps
        return StepResult(ok, 1, Attempt(ok, "recorded"))


def run_of(plan: Any) -> CommandRun:
    return CommandRun("executor", uuid4(), 4, plan_hash(plan), plan)


def everything_the_executor_would_run(plan: Any) -> list[PlanStep]:
    """Each step the executor hands on: all plan steps when they succeed, and the rollback
    steps after a failing first step."""
    ran: list[PlanStep] = []
    for fail_steps in (False, True):
        runner = RecordingRunner(fail_steps)
        execute(run_of(plan), runner)
        ran += runner.ran
    return ran


# -- shapes a model could produce (tests/support/plan_shapes.py) ---------------------------

RED_TEAM = {
    "title": "Observe", "risk_score": 0.0,
    "steps": [{"action": "noop", "params": {"bogus": 1}, "timeout_s": 10, "retry": 0}],
    "rollback": {"steps": [{"action": "noop"}], "action": "script.exec",
                 "params": {"argv": ["touch", "/tmp/opsgate-red-team"]}},
    "verify": {"metric": "error_rate", "below": 0.01},
}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_shapes())
@example(RED_TEAM)
@example({**RED_TEAM, "rollback": NOOP, "risk_score": math.nan,
          "steps": [{**RED_TEAM["steps"][0], "action": "script.exec"}]})
def test_whatever_is_approved_automatically_can_only_ever_run_noop(plan: Any) -> None:
    ran = everything_the_executor_would_run(plan)
    parsed = parsed_or_none(plan) if isinstance(plan, dict) else None
    if parsed is None:
        assert ran == [], "a plan the parser refuses runs nothing, its rollback included"
        assert not any(policy.auto_approves(plan) for policy in POLICIES)
        return
    assert {step.action for step in ran} <= {str(action) for action in parsed.actions}
    for policy in POLICIES:
        if policy.auto_approves(plan) and policy.auto_approve == "noop_only":
            assert {step.action for step in ran} <= {"noop"}, (plan, ran)
        if policy.auto_approves(plan):
            assert parsed.noop_only or parsed.risk < 0.3


def test_the_shapes_reach_plans_the_policy_approves_and_plans_it_refuses() -> None:
    """The property above is not vacuous: the generator reaches both sides of the gate."""
    noop_only = POLICIES[0]
    budget = settings(max_examples=2000, database=None)
    approved = find(plan_shapes(), noop_only.auto_approves, settings=budget)
    refused = find(plan_shapes(), lambda p: parsed_or_none(p) is not None
                   and not noop_only.auto_approves(p), settings=budget)
    assert everything_the_executor_would_run(approved)
    assert {s.action for s in everything_the_executor_would_run(refused)} - {"noop"}


def test_the_red_team_plan_runs_nothing_at_all() -> None:
    for fail_steps in (False, True):
        runner = RecordingRunner(fail_steps)
        done = execute(run_of(RED_TEAM), runner)
        assert runner.ran == []
        assert done.event is CaseEvent.EXEC_FAILED and "nothing ran" in done.reason
        assert 'has both "action" and "steps"' in done.reason


# -- what the executor hands on, and what it says ---------------------------------------------


def plan_with(rollback: Any) -> dict[str, Any]:
    return {"title": "t", "risk_score": 0.1, "verify": {"metric": "m", "below": 1},
            "steps": [{"action": "script.exec", "params": {"argv": ["x"]}, "timeout_s": 20,
                       "retry": 1}], "rollback": rollback}


def test_one_rollback_step_object_runs_once_with_the_defaults() -> None:
    runner = RecordingRunner(fail_steps=True)
    done = execute(run_of(plan_with(NOOP)), runner)
    step, undo = runner.ran
    assert (step.phase, step.action, step.timeout_s, step.retry) == ("step", "script.exec", 20, 1)
    assert (undo.phase, undo.index, undo.action) == ("rollback", 0, "noop")
    assert (undo.timeout_s, undo.retry, dict(undo.params)) == (
        ROLLBACK_TIMEOUT_S, ROLLBACK_RETRY, {"note": "undo"})
    assert done == Executed(CaseEvent.EXEC_FAILED, "step 1 (script.exec) failed after 1 attempt: "
                            "recorded; rolled back", {"steps": 1, "failed_step": 0,
                                                      "attempts": 1})


def test_a_rollback_list_runs_in_order_with_its_own_limits() -> None:
    runner = RecordingRunner(fail_steps=True)
    block = {"steps": [NOOP, {**NOOP, "timeout_s": 30, "retry": 2}]}
    done = execute(run_of(plan_with(block)), runner)
    assert [(s.index, s.timeout_s, s.retry) for s in runner.ran[1:]] == [
        (0, ROLLBACK_TIMEOUT_S, ROLLBACK_RETRY), (1, 30, 2)]
    assert done.reason.endswith("rolled back (2 steps)")


def test_an_empty_rollback_list_has_nothing_to_undo() -> None:
    runner = RecordingRunner(fail_steps=True)
    done = execute(run_of(plan_with({"steps": []})), runner)
    assert len(runner.ran) == 1 and done.reason.endswith("the plan has no rollback steps")


def test_all_steps_succeeding_is_exec_done() -> None:
    runner = RecordingRunner(fail_steps=False)
    assert execute(run_of(plan_with(NOOP)), runner).event is CaseEvent.EXEC_DONE
    assert [s.phase for s in runner.ran] == ["step"]


def test_a_plan_that_is_not_stored_runs_nothing() -> None:
    runner = RecordingRunner(fail_steps=False)
    done = execute(CommandRun("executor", uuid4(), 4, "abc", None), runner)
    assert runner.ran == [] and done.meta == {"ran": 0} and "not stored" in done.reason


@pytest.mark.parametrize("rollback", [{}, [NOOP], {"steps": [NOOP], **NOOP}])
def test_a_rollback_the_parser_refuses_means_no_step_runs_either(rollback: Any) -> None:
    runner = RecordingRunner(fail_steps=True)
    done = execute(run_of(plan_with(rollback)), runner)
    assert runner.ran == [] and "the approved plan is invalid" in done.reason


def test_a_step_lease_covers_twice_its_timeout_and_never_less_than_configured():
    assert step_lease_s(10, 30.0) == 30.0
    assert step_lease_s(100, 30.0) == 200.0
    assert step_lease_s(10, 1.0) == 25.0  # the margin, for short steps
