"""One plan step with its retries: each attempt runs its adapter through the gateway under a
business key of its own (a redelivered command replays it, never runs it again) and is noted on
the case timeline (``evt.exec.step_result.v1``)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.cases.service import CaseService
from core.consumers.runs import CommandRun
from core.domain.commands import NoteCase
from core.domain.messages import StepResultFacts, Topic
from core.domain.plans import PlanStep
from core.domain.targets import step_target
from core.errors import Unavailable
from core.gateway import BusinessRefusal, CallResult, CallStatus, Gateway, ToolCall
from core.metrics import ADAPTER_STEP_SECONDS
from core.steps.adapters import Adapter, StepContext, StepOutcome, StepRefused
from core.steps.adapters.base import StoredOutcome
from core.steps.capture import truncate

NOTE_OUTPUT_LIMIT = 2048  # bytes of a step's output on the timeline and in the event
LEASE_MARGIN_S = 15.0


def step_lease_s(timeout_s: float, configured_s: float) -> float:
    """A step's gateway lease: a lease shorter than the step would let a repeat claim it while
    it still runs. ``http.request`` bounds each network wait by ``timeout_s`` (not the whole
    exchange), so the lease allows twice the timeout, plus a margin, and never less than the
    configured lease."""
    return max(configured_s, timeout_s + max(timeout_s, LEASE_MARGIN_S))


@dataclass(frozen=True)
class Attempt:
    """One attempt's outcome as stored by the gateway. ``final``: retrying cannot help (the
    step was refused: nothing ran)."""

    ok: bool
    summary: str
    output: str = ""
    duration_s: float = 0.0
    detail: Mapping[str, Any] | None = None
    refused: str | None = None  # the refusal's code

    @property
    def final(self) -> bool:
        return self.ok or self.refused is not None


@dataclass(frozen=True)
class StepResult:
    ok: bool
    attempts: int
    last: Attempt

    def describe(self, step: PlanStep) -> str:
        if self.ok:
            return f"{step.label} succeeded"
        if self.last.refused in UNKNOWN_OUTCOMES:
            return f"{step.label}: {self.last.summary}"
        if self.last.refused is not None:
            return f"{step.label} refused: {self.last.summary}"
        tries = "1 attempt" if self.attempts == 1 else f"{self.attempts} attempts"
        return f"{step.label} failed after {tries}: {self.last.summary}"


class StepRunner:
    """Runs one plan step with its retries for a command run: each attempt through the gateway,
    each noted on the case."""

    def __init__(self, gateway: Gateway, cases: CaseService, adapters: Mapping[str, Adapter],
                 lease_s: float) -> None:
        self.gateway = gateway
        self.cases = cases
        self.adapters = adapters
        self.lease_s = lease_s

    def run(self, run: CommandRun, step: PlanStep) -> StepResult:
        """Attempts until one succeeds, one is refused, or ``1 + step.retry`` have failed."""
        attempt = Attempt(False, "never ran")
        number = 0
        for number in range(1, step.retry + 2):
            attempt = self._attempt(run, step, number)
            self._note(run, step, number, attempt)
            if attempt.final:
                break
        return StepResult(attempt.ok, number, attempt)

    # -- one attempt ----------------------------------------------------------------------

    def _attempt(self, run: CommandRun, step: PlanStep, number: int) -> Attempt:
        part = str(step.index) if step.phase == "step" else f"rollback:{step.index}"
        # The case version is part of the key: after resume, re-planning and a new approval the
        # same plan runs again for real instead of replaying the earlier run's results.
        business_key = f"{run.case_id}:{run.plan_hash}:{run.version}:{part}:{number}"
        call = ToolCall(tool=f"step.{step.action}", args=dict(step.params), actor=run.consumer,
                        session_id=run.session_id, business_key=business_key)
        lease_s = step_lease_s(step.timeout_s, self.lease_s)
        result = self.gateway.run(call, self._executor(run, step, number, business_key),
                                  lease_s=lease_s, wait_s=lease_s,
                                  idempotent=step.action == "noop")
        return _attempt_from(result, step)

    def _executor(self, run: CommandRun, step: PlanStep, number: int,
                  business_key: str) -> Callable[[Mapping[str, Any]], Any]:
        def execute(params: Mapping[str, Any]) -> StoredOutcome:
            adapter = self.adapters.get(step.action)
            if adapter is None:
                raise BusinessRefusal(f"{step.action}: no adapter is configured",
                                      code=StepRefused.code, action=str(step.action))
            ctx = StepContext(str(run.case_id), run.plan_hash or "", step.index, number,
                              downstream_key(business_key), step.timeout_s)
            started = time.monotonic()
            try:
                outcome = adapter.run(params, ctx)
            except StepRefused as no:
                raise BusinessRefusal(no.message, code=no.code, **no.details) from no
            finally:
                ADAPTER_STEP_SECONDS.labels(action=step.action).observe(
                    time.monotonic() - started)
            # Measured here so the stored result carries it: a replay notes the same duration.
            return outcome.stored(round(time.monotonic() - started, 3))
        return execute

    def _note(self, run: CommandRun, step: PlanStep, number: int, attempt: Attempt) -> None:
        event = "step_result" if step.phase == "step" else "rollback_result"
        meta: StepResultFacts = {
            "phase": step.phase, "step": step.index, "attempt": number,
            "attempts_allowed": step.retry + 1, "action": str(step.action), "ok": attempt.ok,
            "duration_s": attempt.duration_s,
            "output": truncate(attempt.output, NOTE_OUTPUT_LIMIT) if attempt.output else "",
            "plan_hash": run.plan_hash,
        }
        if attempt.refused is not None:
            meta["refused"] = attempt.refused
        if attempt.detail:
            meta["detail"] = dict(attempt.detail)
        note = NoteCase(run.case_id, event, run.consumer, reason=f"{step.label}: {attempt.summary}",
                        meta=meta, topic=Topic.EXEC_STEP_RESULT)
        phase = "step" if step.phase == "step" else "rollback"
        # A run that outlived its lease notes under a key of its own: the attempt's own key may
        # already hold what the run that found it unfinished noted ("may have happened").
        late = ":unknown_outcome" if attempt.refused == "unknown_outcome" else ""
        self.cases.note(note, f"{run.key}:{phase}:{step.index}:{number}{late}").data()


def step_named_by(business_key: str | None, action: str) -> str | None:
    """The step a step call's business key names (``case:plan:version:part:attempt``, as
    ``StepRunner`` writes it), in words: "step 2 (script.exec), attempt 1"; None for any
    other key."""
    parts = (business_key or "").split(":")
    if len(parts) == 5 and parts[3].isdigit():
        what, index = "step", parts[3]
    elif len(parts) == 6 and parts[3] == "rollback" and parts[4].isdigit():
        what, index = "rollback step", parts[4]
    else:
        return None
    return f"{what} {int(index) + 1} ({action}), attempt {parts[-1]}"


def downstream_key(business_key: str) -> str:
    """The Idempotency-Key an attempt sends downstream: stable per attempt, header-safe, and
    free of the case id."""
    digest = hashlib.sha256(f"opsgate.step:{business_key}".encode()).hexdigest()
    return f"opsgate-step-{digest[:40]}"


UNKNOWN_OUTCOMES = ("unknown_outcome", "needs_reconciliation")
"""Refusals after which nobody knows whether the step took effect: a person checks its target."""


def unknown_outcome_summary(code: str, step: PlanStep, returned: Any) -> str:
    """Why the step's outcome is unknown and which target to check, in words; ``returned``
    is what a run that outlived its lease reported (untrusted: shown as what it said)."""
    target = step_target(step.action, step.params)
    if code == "unknown_outcome":
        said = returned.get("summary") if isinstance(returned, Mapping) else None
        reported = f" (it reported: {said})" if said else ""
        return (f"outcome unknown — check {target}: the step finished after its lease "
                f"ended{reported}, so whether it took effect is not known")
    return (f"outcome unknown — check {target}: an earlier run may have happened without "
            f"its result being stored")


def _attempt_from(result: CallResult, step: PlanStep) -> Attempt:
    if result.status is CallStatus.IN_PROGRESS:
        # Another worker still runs this very attempt after we waited a whole lease: transient,
        # the consumer runner retries the message later.
        raise Unavailable(f"{step.label} is still running elsewhere; retry later",
                          key=result.key)
    if result.error is not None:
        code = str(result.error.get("code", "refused"))
        if code in UNKNOWN_OUTCOMES:
            return Attempt(False, unknown_outcome_summary(code, step, result.result),
                           refused=code)
        return Attempt(False, str(result.error.get("message", code)), refused=code)
    outcome, took = StepOutcome.from_stored(result.result)
    return Attempt(ok=outcome.ok, summary=outcome.summary, output=outcome.output,
                   duration_s=took, detail=outcome.detail or None)
