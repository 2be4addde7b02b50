"""The executor (``cmd.exec.run``): runs the approved plan's steps in order through the gateway,
retrying a failing step up to its ``retry``; all ok → ``exec_done``; a step that keeps failing
(or is refused) → the plan's rollback steps, then ``exec_failed`` (the case parks).

What runs is the ``ParsedPlan`` (``parse_plan``), the same reading the approval policy judged:
a stored plan that does not meet the contract runs nothing, its rollback included. One step at a
time is ``execute_step``: the consumer's loop and ``POST /adapter/exec`` (after ``next_step``)
both run it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from core.cases.replies import Reply
from core.cases.service import CaseService
from core.consumers.runs import CommandRun, current_run, noted
from core.domain.commands import Attribution, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import CommandPayload, StepResultFacts, Topic, payload_as
from core.domain.plans import ParsedPlan, PlanStep, parse_plan
from core.domain.views import MovedCase
from core.errors import InvalidPlan
from core.messaging.consumer import Delivery
from core.steps.adapters import adapters_from_settings
from core.steps.runner import StepResult, StepRunner

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)


class RunsSteps(Protocol):
    """Runs one step with its retries (``StepRunner``; tests record instead)."""

    def run(self, run: CommandRun, step: PlanStep) -> StepResult: ...


@dataclass(frozen=True)
class Executed:
    """What running a plan came to: the event to move the case with, and why."""

    event: CaseEvent
    reason: str
    meta: dict[str, Any] = field(default_factory=dict)


class Executor:
    """Consumer of ``cmd.exec.run``."""

    name = "executor"
    topics: tuple[str, ...] = (Topic.EXEC_RUN,)

    def __init__(self, app: App) -> None:
        self.app = app
        self.steps = StepRunner(app.gateway, app.cases, adapters_from_settings(app.settings),
                                lease_s=app.settings.gateway_lease_s)

    def handle(self, delivery: Delivery) -> None:
        payload = payload_as(CommandPayload, delivery.envelope.payload)
        run = current_run(self.app.cases, self.name, payload, CaseStatus.EXECUTING)
        if run is None:
            return
        self._finish(run, delivery, execute(run, self.steps))

    def _finish(self, run: CommandRun, delivery: Delivery, done: Executed) -> None:
        reply = finish(self.app.cases, run, done, inbox_entry=delivery.inbox_entry)
        if reply.moved_on:
            # Another delivery of this command finished first and moved the case on.
            log.info("executor: case %s moved on before %s (%s)", run.case_id, done.event,
                     reply.body)
            return
        reply.data()  # anything else unexpected raises: the runner retries, then buries


def execute(run: CommandRun, runner: RunsSteps) -> Executed:
    """Run the approved plan's steps in order (``execute_step``); at the first that fails for
    good, its rollback. Only the parsed plan's steps ever reach ``runner``."""
    plan = runnable_plan(run)
    if isinstance(plan, Executed):
        return plan
    for step in plan.steps:
        done = execute_step(run, plan, step, runner).done
        if done is not None:
            return done
    return all_done(len(plan.steps))


@dataclass(frozen=True)
class StepTaken:
    """Where the plan stands after one of its steps ran: how many of its ``total`` steps have
    succeeded, and the move the plan came to (None: steps remain)."""

    total: int
    succeeded: int
    done: Executed | None


def execute_step(run: CommandRun, plan: ParsedPlan, step: PlanStep | None,
                 runner: RunsSteps) -> StepTaken:
    """The executor's one step: run ``step`` of the plan, those before it having succeeded
    (None: every step has, and the plan is done). The last step's success is ``exec_done``;
    a step failed for good runs the plan's rollback and is ``exec_failed``."""
    total = len(plan.steps)
    if step is None:
        return StepTaken(total, total, all_done(total))
    failed = run_step(run, plan, step, runner)
    succeeded = step.index + (failed is None)
    if failed is None and succeeded == total:
        return StepTaken(total, succeeded, all_done(total))
    return StepTaken(total, succeeded, failed)


def next_step(cases: CaseService, run: CommandRun, plan: ParsedPlan) -> PlanStep | None:
    """The first step of the plan no note of this run's case version records a success of (by
    anyone: the executor consumer, the REST walkthrough); None when every step has succeeded."""
    succeeded = {facts["step"] for facts in noted(cases, run, "step_result", StepResultFacts)
                 if facts["ok"] and facts["phase"] == "step"}
    return next((step for step in plan.steps if step.index not in succeeded), None)


def run_step(run: CommandRun, plan: ParsedPlan, step: PlanStep,
             runner: RunsSteps) -> Executed | None:
    """Run one step of the plan with its retries: None when it succeeded; when it failed for
    good, the plan's rollback runs and the outcome is ``exec_failed``."""
    result = runner.run(run, step)
    if result.ok:
        return None
    meta: dict[str, Any] = {"steps": len(plan.steps), "failed_step": step.index,
                            "attempts": result.attempts}
    if result.last.refused is not None:
        meta["refused"] = result.last.refused
    rolled_back = roll_back(run, plan, runner)
    return Executed(CaseEvent.EXEC_FAILED, f"{result.describe(step)}; {rolled_back}", meta)


def all_done(steps: int) -> Executed:
    """Every one of the plan's ``steps`` succeeded: ``exec_done``."""
    return Executed(CaseEvent.EXEC_DONE, f"all {steps} steps succeeded" if steps > 1
                    else "the step succeeded", {"steps": steps})


def finish(cases: CaseService, run: CommandRun, done: Executed, *,
           inbox_entry: tuple[str, int] | None = None,
           attribution: Attribution | None = None) -> Reply[MovedCase]:
    """Move the case with what running its plan came to, as the run's actor, once per run (a
    repeat replays the move; a move made first by another is ``moved_on``)."""
    cmd = TransitionCase(run.case_id, done.event, actor=run.consumer, reason=done.reason,
                         meta={"plan_hash": run.plan_hash, **done.meta},
                         expected_version=run.version, attribution=attribution or {})
    return cases.transition(cmd, f"{run.key}:{done.event}", inbox_entry=inbox_entry)


def roll_back(run: CommandRun, plan: ParsedPlan, runner: RunsSteps) -> str:
    """Run the plan's rollback steps in order, stopping at the first that fails (a later undo
    may assume an earlier one worked); says what happened, for the park reason."""
    steps = rollback_steps(plan)
    if not steps:
        return "the plan has no rollback steps"
    for step in steps:
        result = runner.run(run, step)
        if not result.ok:
            return f"rollback stopped: {result.describe(step)}"
    return "rolled back" if len(steps) == 1 else f"rolled back ({len(steps)} steps)"


def runnable_plan(run: CommandRun) -> ParsedPlan | Executed:
    """The approved plan as parsed; when it may not run, the ``exec_failed`` that says why
    (nothing runs, its rollback included)."""
    if run.plan is None:
        return _not_run(f"the approved plan {run.plan_hash} is not stored; nothing ran")
    try:
        return parse_plan(run.plan)
    except InvalidPlan as invalid:
        problems = "; ".join(invalid.details["problems"][:3])
        return _not_run(f"the approved plan is invalid ({problems}); nothing ran")


def _not_run(problem: str) -> Executed:
    return Executed(CaseEvent.EXEC_FAILED, problem, {"ran": 0})


def rollback_steps(plan: ParsedPlan) -> list[PlanStep]:
    """The plan's rollback steps (defaults already filled in by the parser)."""
    return list(plan.rollback)
