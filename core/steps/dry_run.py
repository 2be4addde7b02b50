"""A plan's dry run, taken when it is proposed: each step (and rollback step) asked of its own
adapter (``DryRunnable``), which reads its target and never writes it. The ``plan_ready`` guard
judges the report (``core.domain.dry_run``); the plan message shows it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from core.domain.dry_run import DryRunLine, DryRunReport
from core.domain.plans import ParsedPlan, PlanStep, StepAction
from core.errors import OpsgateError
from core.steps.adapters.base import Adapter, DryRunnable, NothingToChange, StepRefused

log = logging.getLogger(__name__)

NO_DRY_RUN: Mapping[str, str] = {
    StepAction.GATEWAY_FLIP: "the traffic gateway answers no dry run",
    StepAction.MCP_CALL: "an external MCP tool answers no dry run",
}


class PlanDryRun:
    """The dry run of plans with the adapters ``build`` makes (the executor's, from the same
    settings), built on the first plan: a process that never plans never reads a kubeconfig."""

    def __init__(self, build: Callable[[], Mapping[str, Adapter]]) -> None:
        self._build = build
        self._adapters: Mapping[str, Adapter] | None = None
        self._lock = threading.Lock()

    def __call__(self, plan: ParsedPlan) -> DryRunReport:
        adapters = self._ready()
        lines = tuple(self.line(adapters.get(str(step.action)), step)
                      for step in (*plan.steps, *plan.rollback))
        return DryRunReport(plan.digest, lines)

    def _ready(self) -> Mapping[str, Adapter]:
        with self._lock:
            if self._adapters is None:
                self._adapters = self._build()
            return self._adapters

    @staticmethod
    def line(adapter: Adapter | None, step: PlanStep) -> DryRunLine:
        """One step's dry run: what its adapter read, a refusal when it cannot run, or what
        could not be checked and why."""
        if step.action is StepAction.NOOP:
            return DryRunLine(step.label, "ok", "does nothing")
        if adapter is None or not isinstance(adapter, DryRunnable):
            why = NO_DRY_RUN.get(str(step.action), "its action answers no dry run")
            return DryRunLine(step.label, "not_checked", why)
        try:
            verdict, says = adapter.dry_run(step.params)
        except NothingToChange as same:
            if step.phase == "rollback":  # it sets back what the steps will have changed
                return DryRunLine(step.label, "ok", "would set back what the steps change ("
                                  f"{_unprefixed(same.message, step).split(' already')[0]} "
                                  "holds that now)")
            return DryRunLine(step.label, "refused", _unprefixed(same.message, step))
        except StepRefused as refused:
            return DryRunLine(step.label, "refused", _unprefixed(refused.message, step))
        except OpsgateError as failed:  # the target could not answer: no claim either way
            return DryRunLine(step.label, "not_checked", failed.message)
        except Exception as failed:  # a reading that broke claims nothing, nor stops the plan
            log.exception("dry run of %s failed", step.label)
            return DryRunLine(step.label, "not_checked",
                              f"its dry run failed ({type(failed).__name__})")
        return DryRunLine(step.label, verdict, says)


def _unprefixed(message: str, step: PlanStep) -> str:
    """An adapter's refusal without its action's name (the step's label already says it)."""
    return message.removeprefix(f"{step.action}: ")
