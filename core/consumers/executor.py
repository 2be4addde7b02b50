"""The executor (``cmd.exec.run``): runs the approved plan's steps in order through the gateway,
retrying a failing step up to its ``retry``; all ok → ``exec_done``; a step that keeps failing
(or is refused) → the plan's rollback steps, then ``exec_failed`` (the case parks)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from core.consumers.runs import PlanRun, current_run
from core.consumers.steps import Step, StepResult, StepRunner
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.domain.plans import PlanStep, plan_problems
from core.executor.adapters import adapters_from_settings
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

ROLLBACK_TIMEOUT_S = 60  # a rollback step's timeout_s when the plan gives none
ROLLBACK_RETRY = 0  # a rollback step's retry when the plan gives none


class Executor:
    """Consumer of ``cmd.exec.run``."""

    name = "executor"
    topics: tuple[str, ...] = (Topic.EXEC_RUN,)

    def __init__(self, app: App) -> None:
        self.app = app
        self.steps = StepRunner(app.gateway, app.cases, adapters_from_settings(app.settings),
                                lease_s=app.settings.gateway_lease_s)

    def handle(self, delivery: Delivery) -> None:
        run = current_run(self.app.cases, self.name, delivery.envelope.payload,
                          CaseStatus.EXECUTING)
        if run is None:
            return
        steps, problem = plan_steps(run)
        if problem is not None:
            self._finish(run, delivery, CaseEvent.EXEC_FAILED, problem, {"ran": 0})
            return
        for step in steps:
            result = self.steps.run(run, step)
            if not result.ok:
                self._fail(run, delivery, step, result, len(steps))
                return
        self._finish(run, delivery, CaseEvent.EXEC_DONE,
                     f"all {len(steps)} steps succeeded" if len(steps) > 1
                     else "the step succeeded", {"steps": len(steps)})

    def _fail(self, run: PlanRun, delivery: Delivery, step: Step, result: StepResult,
              count: int) -> None:
        rolled_back = self._roll_back(run)
        meta: dict[str, Any] = {"steps": count, "failed_step": step.index,
                                "attempts": result.attempts}
        if result.last.refused is not None:
            meta["refused"] = result.last.refused
        self._finish(run, delivery, CaseEvent.EXEC_FAILED,
                     f"{result.describe(step)}; {rolled_back}", meta)

    def _roll_back(self, run: PlanRun) -> str:
        """Run the plan's rollback steps in order, stopping at the first that fails (a later
        undo may assume an earlier one worked); says what happened, for the park reason."""
        block = (run.plan or {}).get("rollback")
        steps, problem = rollback_steps(block)
        if problem is not None:
            return f"rollback not run: {problem}"
        if not steps:
            return "the plan has no rollback steps"
        for step in steps:
            result = self.steps.run(run, step)
            if not result.ok:
                return f"rollback stopped: {result.describe(step)}"
        return "rolled back" if len(steps) == 1 else f"rolled back ({len(steps)} steps)"

    def _finish(self, run: PlanRun, delivery: Delivery, event: CaseEvent, reason: str,
                meta: dict[str, Any]) -> None:
        cmd = TransitionCase(run.case_id, event, actor=self.name, reason=reason,
                             meta={"plan_hash": run.plan_hash, **meta},
                             expected_version=run.version)
        reply = self.app.cases.transition(cmd, f"{run.key}:{event}",
                                          inbox_entry=delivery.inbox_entry)
        if reply.status in (409, 412):
            # Another delivery of this command finished first and moved the case on.
            log.info("executor: case %s moved on before %s (%s)", run.case_id, event, reply.body)
            return
        reply.data()  # anything else unexpected raises: the runner retries, then buries


def plan_steps(run: PlanRun) -> tuple[list[Step], str | None]:
    """The approved plan's steps, or why there are none to run."""
    if run.plan is None:
        return [], f"the approved plan {run.plan_hash} is not stored; nothing ran"
    problems = plan_problems(run.plan)
    if problems:
        return [], f"the approved plan is invalid ({'; '.join(problems[:3])}); nothing ran"
    parsed = [PlanStep.model_validate(raw) for raw in run.plan["steps"]]
    return [Step("step", n, str(s.action), s.params, s.timeout_s, s.retry)
            for n, s in enumerate(parsed)], None


def rollback_steps(block: Any) -> tuple[list[Step], str | None]:
    """A plan's ``rollback``: one step object, ``{"steps": [...]}``, a list of steps, or ``{}``
    (nothing to undo). A step without ``timeout_s``/``retry`` gets ``ROLLBACK_TIMEOUT_S`` and
    ``ROLLBACK_RETRY``; a step that fails the step schema stops the whole rollback."""
    if isinstance(block, Mapping) and not block:
        return [], None
    if isinstance(block, Mapping) and "action" in block:
        raw: Any = [block]
    elif isinstance(block, Mapping) and "steps" in block:
        raw = block["steps"]
    else:
        raw = block
    if not isinstance(raw, list):
        return [], f"the rollback block is not a step or a list of steps: {str(block)[:200]}"
    steps = []
    for n, item in enumerate(raw):
        if not isinstance(item, Mapping):
            return [], f"rollback step {n + 1} is not an object"
        try:
            step = PlanStep.model_validate({"timeout_s": ROLLBACK_TIMEOUT_S,
                                            "retry": ROLLBACK_RETRY, **item})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                 for e in exc.errors(include_url=False))
            return [], f"rollback step {n + 1} is invalid: {problems}"
        steps.append(Step("rollback", n, str(step.action), step.params, step.timeout_s,
                          step.retry))
    return steps, None
