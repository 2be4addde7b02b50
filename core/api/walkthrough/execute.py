"""``POST /adapter/exec``: the executor's one step, on the approved plan's next step, now, and
the answer: the case as the step left it, what ran, and the move the plan came to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from core.api.walkthrough.consumers import Consumers
from core.api.walkthrough.once import Caller, caller_run, once
from core.cases.replies import Reply
from core.consumers.executor import (
    Executed,
    StepTaken,
    execute_step,
    finish,
    next_step,
    runnable_plan,
)
from core.consumers.runs import CommandRun
from core.domain.fsm import CaseStatus
from core.domain.plans import PlanStep, parsed_or_none
from core.errors import Unprocessable
from core.steps.runner import StepResult, StepRunner, step_lease_s

if TYPE_CHECKING:
    from core.bootstrap import App


class OffPlan(Unprocessable):
    """A request to run something other than the approved plan's next step: nothing runs."""

    code = "off_plan"


def execute_next_step(loop: Consumers, case_id: UUID, caller: Caller,
                      action: str | None = None) -> Reply[Any]:
    """The approved plan's next step, run as the executor runs it; after the last one (or a
    failure and its rollback) the case moves as the executor moves it. ``action``: the
    action the caller expects that step to be (any other is ``OffPlan``)."""
    return once(loop.app, caller, "/adapter/exec", case_id, {"action": action},
                lambda: _execute(loop, case_id, caller, action),
                lease_s=_execution_lease_s(loop.app, case_id))


def _execute(loop: Consumers, case_id: UUID, caller: Caller, action: str | None) -> Reply[Any]:
    cases = loop.app.cases
    run = caller_run(cases, caller, case_id, CaseStatus.EXECUTING, "POST /adapter/exec")
    if isinstance(run, Reply):
        return run
    plan = runnable_plan(run)
    if isinstance(plan, Executed):  # as the executor: nothing runs, the case parks
        return _executed(loop, run, caller, [], StepTaken(0, 0, plan))
    step = next_step(cases, run, plan)
    if action is not None and (step is None or step.action != action):
        expected = "none left: every step has run" if step is None else step.action
        return Reply.of_error(OffPlan(
            f"POST /adapter/exec runs only the approved plan's next step ({expected}), not "
            f"{action}", action=action, next_step=None if step is None else step.action))
    runner = _Recording(loop.executor.steps)
    taken = execute_step(run, plan, step, runner)
    return _executed(loop, run, caller, runner.ran, taken)


def _executed(loop: Consumers, run: CommandRun, caller: Caller,
              ran: list[tuple[PlanStep, StepResult]], taken: StepTaken) -> Reply[Any]:
    """The answer: the case as the run left it, each step this request ran, and the move."""
    cases, done = loop.app.cases, taken.done
    moved = None if done is None else finish(cases, run, done, attribution=caller.attribution)
    # Not moved here, or another moved it first: the case as it is now.
    case = cases.get_case(run.case_id) if moved is None or moved.moved_on else moved.data()
    return Reply.of_data({
        **case, "plan_hash": run.plan_hash,
        "ran": [_step_view(step, result) for step, result in ran],
        "steps": {"total": taken.total, "succeeded": taken.succeeded},
        "moved": None if done is None else {"event": str(done.event), "reason": done.reason},
    })


def _execution_lease_s(app: App, case_id: UUID) -> float:
    """How long one request may take: the longest step with its retries, then every rollback
    step with theirs."""
    found = app.cases.proposed_plan(case_id)
    plan = None if found is None else parsed_or_none(found["plan"])
    if plan is None:
        return 0.0
    configured = app.settings.gateway_lease_s

    def lease(step: PlanStep) -> float:
        return float(step_lease_s(step.timeout_s, configured) * (step.retry + 1))

    return max(lease(step) for step in plan.steps) + sum(map(lease, plan.rollback))


class _Recording:
    """The executor's step runner, keeping what each step came to for the answer."""

    def __init__(self, runner: StepRunner) -> None:
        self.runner = runner
        self.ran: list[tuple[PlanStep, StepResult]] = []

    def run(self, run: CommandRun, step: PlanStep) -> StepResult:
        result = self.runner.run(run, step)
        self.ran.append((step, result))
        return result


def _step_view(step: PlanStep, result: StepResult) -> dict[str, Any]:
    view: dict[str, Any] = {"phase": step.phase, "index": step.index, "action": step.action,
                            "ok": result.ok, "attempts": result.attempts,
                            "summary": result.describe(step)}
    if result.last.refused is not None:
        view["refused"] = result.last.refused
    return view
