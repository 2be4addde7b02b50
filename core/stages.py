"""The loop's gate, execution and verification run now, for one case, because a caller asked
(``POST /gate/eval``, ``/adapter/exec``, ``/verify/run``): each does what its consumer does with
a delivered command, through the consumer's own functions, as the caller's principal, and
answers with what it did.

A request is carried out once per Idempotency-Key: the stage runs as one gateway call
(``api.stage``) keyed by it, so a repeat gets the first answer, refusals included, and the key
sent with another request is refused. Inside, every effect keeps the key the consumer's work
derives from the case version (a step's attempt, a verification reading), so a request under a
new key replays what already ran instead of running it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any
from uuid import UUID

from core.cases.gate import automatic_approval
from core.cases.replies import Reply, ReplyOutcome
from core.cases.service import CaseService
from core.consumers.executor import (
    Executed,
    all_done,
    approved_plan,
    finish,
    plan_steps,
    run_step,
)
from core.consumers.gatekeeper import awaiting_approval
from core.consumers.runs import CommandRun, current_run
from core.consumers.verifier import Reading, Verifier
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import CommandPayload
from core.domain.plans import PlanStep, parsed_or_none
from core.errors import IllegalTransition, KeyReuse, Unavailable, Unprocessable, error_from_body
from core.gateway import CallStatus, ToolCall, session_of
from core.steps.adapters import adapters_from_settings
from core.steps.runner import StepResult, StepRunner, step_lease_s

if TYPE_CHECKING:
    from core.bootstrap import App

STAGE_TOOL = "api.stage"


class OffPlan(Unprocessable):
    """A request to run something other than the approved plan's next step: nothing runs."""

    code = "off_plan"


@dataclass(frozen=True)
class Caller:
    """Who asks for a stage: the principal's actor and name, the request's Idempotency-Key and
    correlation id."""

    actor: str
    principal: str
    key: str
    correlation_id: str | None = None

    @property
    def attribution(self) -> dict[str, str]:
        return {"principal": self.principal}


class Stages:
    """The gate, execution and verification of one case, on demand."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.cases = app.cases

    @cached_property
    def steps(self) -> StepRunner:
        """The executor consumer's step runner, on the adapters of the settings."""
        settings = self.app.settings
        return StepRunner(self.app.gateway, self.cases, adapters_from_settings(settings),
                          lease_s=settings.gateway_lease_s)

    @cached_property
    def verifier(self) -> Verifier:
        return Verifier(self.app)

    # -- the three stages ---------------------------------------------------------------------

    def evaluate_gate(self, case_id: UUID, caller: Caller) -> Reply[Any]:
        """The gatekeeper's verdict now: the plan approved automatically when the policy lets
        it (recorded as the gatekeeper's, never the caller's), else who must still approve."""
        return self._once(caller, "/gate/eval", case_id, {},
                          lambda: self._gate(case_id, caller))

    def execute_next_step(self, case_id: UUID, caller: Caller,
                          action: str | None = None) -> Reply[Any]:
        """The approved plan's next step, run as the executor runs it; after the last one (or a
        failure and its rollback) the case moves as the executor moves it. ``action``: the
        action the caller expects that step to be (any other is ``OffPlan``)."""
        return self._once(caller, "/adapter/exec", case_id, {"action": action},
                          lambda: self._execute(case_id, caller, action),
                          lease_s=self._execution_lease_s(case_id))

    def verify_now(self, case_id: UUID, caller: Caller) -> Reply[Any]:
        """One reading of the plan's verify block, the verifier's next: the case closes, parks,
        or keeps waiting (``WAITING``) for its window or its condition until the deadline."""
        return self._once(caller, "/verify/run", case_id, {},
                          lambda: self._verify(case_id, caller))

    # -- once per Idempotency-Key ------------------------------------------------------------

    def _once(self, caller: Caller, endpoint: str, case_id: UUID, request: Mapping[str, Any],
              answer: Callable[[], Reply[Any]], lease_s: float = 0.0) -> Reply[Any]:
        """``answer()`` the first time the caller's key comes with this request; its reply,
        replayed, every later time; ``KeyReuse`` when the key came with another request."""
        self.cases.get_case(case_id)  # an unknown case is NotFound, and nothing is kept of it
        call = ToolCall(STAGE_TOOL, actor=caller.actor, session_id=session_of(case_id),
                        args={"endpoint": endpoint, "case_id": str(case_id),
                              "actor": caller.actor, **request},
                        business_key=f"idempotency-key:{caller.key}")
        lease_s = max(self.app.settings.gateway_lease_s, lease_s)
        # Idempotent: every effect inside is keyed, so a retry after a crash may redo the stage.
        result = self.app.gateway.run(call, lambda _args: _kept(answer()), lease_s=lease_s,
                                      wait_s=lease_s, idempotent=True)
        if result.status is CallStatus.IN_PROGRESS:
            raise Unavailable("this request is still being carried out; retry with the same "
                              "Idempotency-Key", key=caller.key)
        if isinstance(result.refusal, KeyReuse):
            return Reply.of_error(KeyReuse("this Idempotency-Key was used before for a "
                                           "different request", key=caller.key))
        if result.error is not None or not isinstance(result.result, Mapping):
            raise Unavailable(f"the request's outcome was not kept: {result.error}",
                              key=caller.key)
        return _unkept(result.result, replayed=result.status is CallStatus.REPLAYED)

    def _run(self, case_id: UUID, caller: Caller, expected: CaseStatus,
             endpoint: str) -> CommandRun | Reply[Any]:
        """The caller's run of the case's current version, or ``IllegalTransition`` when the
        case is not in ``expected``."""
        case = self.cases.get_case(case_id)
        run = None
        if case["status"] == expected:
            command: CommandPayload = {"case_id": str(case_id), "version": case["version"],
                                       "correlation_id": None}
            run = current_run(self.cases, caller.actor, command, expected)
        if run is None:
            return Reply.of_error(IllegalTransition(
                f"{endpoint} needs a case in {expected}; this one is {case['status']}",
                status=case["status"], expected=str(expected)))
        return run

    # -- the gate ----------------------------------------------------------------------------

    def _gate(self, case_id: UUID, caller: Caller) -> Reply[Any]:
        run = self._run(case_id, caller, CaseStatus.WAIT_GATE, "POST /gate/eval")
        if isinstance(run, Reply):
            return run
        assert run.plan is not None, "a case waits at the gate on a stored plan"
        assert run.plan_hash is not None
        policy = self.cases.policy
        approval = automatic_approval(policy, case_id, run.plan, run.plan_hash,
                                      version=run.version, correlation_id=caller.correlation_id,
                                      attribution=caller.attribution)
        if approval is not None:
            return self.cases.approve_plan(approval, f"{run.key}:approve")
        note = awaiting_approval(self.cases, policy, run, caller.correlation_id)
        noted = self.cases.note(note, f"{run.key}:awaiting_approval").data()
        case = {key: value for key, value in noted.items() if key != "note"}
        pending = {**self._pending(run, str(note.reason)),
                   "expires_at": note.meta.get("expires_at")}
        return Reply.of_data({**case, "plan_hash": run.plan_hash, "approval": pending})

    def _pending(self, run: CommandRun, waiting: str) -> dict[str, Any]:
        """What the gate still needs: where it stands on the yeses so far, who may give the
        rest, why the plan does not approve itself, and where people approve."""
        status = self.cases.gate_status(run.case_id, run.plan_hash)
        assert status is not None, "a case waits at the gate on a stored plan"
        return {"state": status.state, "approvers": list(status.approvers),
                "needs": status.needs, "reason": status.reason, "requester": status.requester,
                "eligible": self.cases.policy.describe_approvers(),
                "automatic": status.automatic, "waiting": waiting,
                "use": f"POST /case/{run.case_id}/approve"}

    # -- the execution -----------------------------------------------------------------------

    def _execute(self, case_id: UUID, caller: Caller, action: str | None) -> Reply[Any]:
        run = self._run(case_id, caller, CaseStatus.EXECUTING, "POST /adapter/exec")
        if isinstance(run, Reply):
            return run
        plan, problem = approved_plan(run)
        if plan is None:  # as the executor: nothing runs, the case parks
            failed = Executed(CaseEvent.EXEC_FAILED, problem, {"ran": 0})
            return self._executed(run, caller, [], failed, succeeded=0, total=0)
        steps = plan_steps(plan)
        step = self._next_step(run, steps)
        if action is not None and (step is None or step.action != action):
            expected = "none left: every step has run" if step is None else step.action
            return Reply.of_error(OffPlan(
                f"POST /adapter/exec runs only the approved plan's next step ({expected}), not "
                f"{action}", action=action, next_step=None if step is None else step.action))
        runner = _Recording(self.steps)
        done: Executed | None
        if step is None:  # every step succeeded before (the move did not happen): move now
            done, succeeded = all_done(len(steps)), len(steps)
        else:  # the steps before this one succeeded
            done = run_step(run, plan, step, runner)
            succeeded = step.index + (done is None)
            if succeeded == len(steps):
                done = all_done(len(steps))
        return self._executed(run, caller, runner.ran, done, succeeded=succeeded,
                              total=len(steps))

    def _executed(self, run: CommandRun, caller: Caller, ran: list[tuple[PlanStep, StepResult]],
                  done: Executed | None, *, succeeded: int, total: int) -> Reply[Any]:
        """The answer: the case as the run left it, each step this request ran, and the move."""
        moved = None if done is None else finish(self.cases, run, done,
                                                 attribution=caller.attribution)
        # Not moved here, or another moved it first: the case as it is now.
        case = (self.cases.get_case(run.case_id) if moved is None or moved.moved_on
                else moved.data())
        return Reply.of_data({
            **case, "plan_hash": run.plan_hash,
            "ran": [_step_view(step, result) for step, result in ran],
            "steps": {"total": total, "succeeded": succeeded},
            "moved": None if done is None else {"event": str(done.event),
                                                "reason": done.reason},
        })

    def _next_step(self, run: CommandRun, steps: list[PlanStep]) -> PlanStep | None:
        """The first step of the run not yet noted a success (by anyone: the executor consumer
        too); None when every step has succeeded."""
        succeeded = {context["step"] for context in _notes(self.cases, run, "step_result")
                     if context.get("ok") and context.get("phase") == "step"}
        return next((step for step in steps if step.index not in succeeded), None)

    def _execution_lease_s(self, case_id: UUID) -> float:
        """How long one request may take: the longest step with its retries, then every
        rollback step with theirs."""
        found = self.cases.proposed_plan(case_id)
        plan = None if found is None else parsed_or_none(found["plan"])
        if plan is None:
            return 0.0
        configured = self.app.settings.gateway_lease_s

        def lease(step: PlanStep) -> float:
            return float(step_lease_s(step.timeout_s, configured) * (step.retry + 1))

        return max(lease(step) for step in plan.steps) + sum(map(lease, plan.rollback))

    # -- the verification --------------------------------------------------------------------

    def _verify(self, case_id: UUID, caller: Caller) -> Reply[Any]:
        run = self._run(case_id, caller, CaseStatus.VERIFYING, "POST /verify/run")
        if isinstance(run, Reply):
            return run
        taken = [int(context["reading"]) for event in ("verify_reading", "verify_result")
                 for context in _notes(self.cases, run, event) if "reading" in context]
        reading = self.verifier.take(run, max(taken, default=0) + 1)
        moved = reading.moved  # None: waiting, or another moved the case first
        case = moved.data() if moved is not None else self.cases.get_case(case_id)
        return Reply.of_data({**case, "plan_hash": run.plan_hash,
                              "verification": _reading_view(reading)},
                             ReplyOutcome.WAITING if reading.event is None
                             else ReplyOutcome.DONE)


class _Recording:
    """The executor's step runner, keeping what each step came to for the answer."""

    def __init__(self, runner: StepRunner) -> None:
        self.runner = runner
        self.ran: list[tuple[PlanStep, StepResult]] = []

    def run(self, run: CommandRun, step: PlanStep) -> StepResult:
        result = self.runner.run(run, step)
        self.ran.append((step, result))
        return result


def _kept(reply: Reply[object]) -> dict[str, Any]:
    """A reply as the gateway keeps it, for every repeat of the request."""
    return {"outcome": str(reply.outcome), "body": reply.body}


def _unkept(kept: Mapping[str, Any], *, replayed: bool) -> Reply[Any]:
    """The reply ``_kept`` stored. One kept before replies had an outcome (with the status
    the API sent, for a day in Redis and in older ledger rows) has it read off its body: a
    refusal's error, or a verification that waits."""
    body = str(kept["body"])
    if "outcome" in kept:
        return Reply(ReplyOutcome(kept["outcome"]), body, replayed=replayed)
    parsed = json.loads(body)
    if "error" in parsed:
        refused = Reply.of_error(error_from_body(parsed)).outcome
        return Reply(refused, body, replayed=replayed)
    waits = (parsed["data"].get("verification") or {"event": "-"})["event"] is None
    return Reply(ReplyOutcome.WAITING if waits else ReplyOutcome.DONE, body, replayed=replayed)


def _notes(cases: CaseService, run: CommandRun, event: str) -> list[Mapping[str, Any]]:
    """What the notes ``event`` of this run (case version and plan) recorded."""
    found = []
    for row in cases.timeline(run.case_id):
        meta, context = row["meta"], row["meta"].get("context") or {}
        if row["event"] == event and meta.get("version") == run.version \
                and context.get("plan_hash") == run.plan_hash:
            found.append(context)
    return found


def _step_view(step: PlanStep, result: StepResult) -> dict[str, Any]:
    view: dict[str, Any] = {"phase": step.phase, "index": step.index, "action": step.action,
                            "ok": result.ok, "attempts": result.attempts,
                            "summary": result.describe(step)}
    if result.last.refused is not None:
        view["refused"] = result.last.refused
    return view


def _reading_view(reading: Reading) -> dict[str, Any]:
    """A reading as the answer shows it: what it saw, and what it waits on or led to."""
    seen = reading.observation
    view: dict[str, Any] = {
        "reading": reading.number, "state": seen["state"], "reason": reading.reason,
        "observed": seen.get("observed"), "at": seen.get("at"),
        "event": None if reading.event is None else str(reading.event),
    }
    for name in ("waiting_for", "next_reading_at"):  # next_reading_at: VerifyWaitingFacts
        if name in seen:
            view[name] = seen.get(name)
    if reading.watch is not None:
        view.update(since=reading.watch.since.isoformat(),
                    window_ends_at=reading.watch.window_ends.isoformat(),
                    deadline=reading.watch.deadline.isoformat())
    return view
