"""``POST /verify/run``: the verifier's one step, its next reading of the plan's verify block,
now, and the answer: the case closed, parked, or waiting (``WAITING``) with what it waits on."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from core.api.walkthrough.consumers import Consumers
from core.api.walkthrough.once import Caller, caller_run, once
from core.cases.replies import Reply, ReplyOutcome
from core.consumers.verifier import Reading
from core.domain.fsm import CaseStatus


def verify_now(loop: Consumers, case_id: UUID, caller: Caller) -> Reply[Any]:
    """One reading of the plan's verify block, the verifier's next: the case closes, parks,
    or keeps waiting (``WAITING``) for its window or its condition until the deadline."""
    return once(loop.app, caller, "/verify/run", case_id, {},
                lambda: _verify(loop, case_id, caller))


def _verify(loop: Consumers, case_id: UUID, caller: Caller) -> Reply[Any]:
    cases, verifier = loop.app.cases, loop.verifier
    run = caller_run(cases, caller, case_id, CaseStatus.VERIFYING, "POST /verify/run")
    if isinstance(run, Reply):
        return run
    reading = verifier.take(run, verifier.next_reading(run))
    moved = reading.moved  # None: waiting, or another moved the case first
    case = moved.data() if moved is not None else cases.get_case(case_id)
    return Reply.of_data({**case, "plan_hash": run.plan_hash,
                          "verification": _reading_view(reading)},
                         ReplyOutcome.WAITING if reading.event is None else ReplyOutcome.DONE)


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
