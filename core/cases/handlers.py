"""The command handlers: open a case, note a fact on it, move it by one FSM event. Each runs
inside the unit of work's transaction on the locked case, gathers its rows in ``Writes`` and
returns its reply's data, or raises ``uow.refuse(...)``. The gate's own commands (a yes, a no)
and the guards of its moves are ``core.cases.gate``'s."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast
from uuid import uuid4

from sqlalchemy import Connection

from core.cases.rows import TimelineRow, case_view, correlation_of, timeline_row
from core.cases.uow import refuse
from core.db import case_store as store
from core.domain.commands import NoteCase, OpenCase, TransitionCase
from core.domain.fsm import INITIAL_STATUS, Accepted, CaseEvent, CaseStatus, MoveRefused, decide
from core.domain.messages import (
    MoveContext,
    NotePayload,
    messages_for,
    note_message,
    opened_message,
    scheduled_message,
)
from core.domain.views import CaseView, MovedCase, NotedCase
from core.errors import GuardFailed, IllegalTransition, VersionConflict

if TYPE_CHECKING:
    from core.cases.gate import Ruling

Row = Mapping[Any, Any]


class Guard(Protocol):
    """What a move asks before it is recorded (the gate: ``core.cases.gate.Gate``)."""

    def admit(self, conn: Connection, case: Row, cmd: TransitionCase, next_version: int,
              writes: store.Writes, ruling: Ruling | None) -> str | None:
        """Record what the event's guard admits; the plan hash it concerns (None: no plan).
        ``GuardFailed`` (or another refusal) when it does not."""


def open_case(cmd: OpenCase, writes: store.Writes, *, tenant: str, now: datetime) -> CaseView:
    """A new case in NEW (version 0), bound to its chat thread when it has one."""
    case_id = uuid4()
    row = {"id": case_id, "tenant": cmd.tenant or tenant, "title": cmd.title,
           "severity": cmd.severity, "status": str(INITIAL_STATUS), "version": 0,
           "created_at": now, "updated_at": now,
           "components": list(cmd.components) or None}
    writes.new_case = row
    if cmd.thread is not None:
        # Bound with the case, so nothing the case causes (its outbox) finds it threadless.
        writes.thread = {"team": cmd.thread.team, "channel": cmd.thread.channel,
                         "thread_ts": cmd.thread.thread_ts, "case_id": case_id,
                         "created_at": now}
    correlation_id = correlation_of(cmd.correlation_id)
    writes.timeline = timeline_row(case_id, "case_opened", cmd.actor, None, correlation_id, now,
                                   outcome="opened", source=None, target=str(INITIAL_STATUS),
                                   version=0, facts=cmd.attribution)
    writes.outbox = [opened_message(case_id, cmd.title, cmd.severity, cmd.actor,
                                    correlation_id)]
    return case_view(row)


def note(case: Row | None, cmd: NoteCase, writes: store.Writes, *, now: datetime) -> NotedCase:
    """A fact on the case's timeline (and ``cmd.topic``'s event, ``cmd.schedule``'s command)
    that does not move it."""
    assert case is not None, "a note always concerns a locked case"
    if cmd.event in CaseEvent.__members__.values():
        raise refuse(GuardFailed(f"{cmd.event} is an FSM event: move the case instead",
                                 problems=[f"event: {cmd.event}"]))
    correlation_id = correlation_of(cmd.correlation_id)
    writes.timeline = timeline_row(cmd.case_id, cmd.event, cmd.actor, cmd.reason,
                                   correlation_id, now, outcome="note", source=case["status"],
                                   target=case["status"], version=case["version"],
                                   context=cmd.meta)
    payload: NotePayload = {"case_id": str(cmd.case_id), "version": case["version"],
                            "event": cmd.event, "actor": cmd.actor, "reason": cmd.reason,
                            "correlation_id": correlation_id}
    if cmd.topic is not None:
        writes.outbox.append(note_message(cmd.topic, payload, cmd.meta))
    if cmd.schedule is not None:
        writes.outbox.append(scheduled_message(cmd.schedule.topic, payload, cmd.event,
                                               cmd.schedule.payload,
                                               cmd.schedule.deliver_after))
    return {**case_view(case), "note": cmd.event}


def move(conn: Connection, case: Row | None, cmd: TransitionCase, writes: store.Writes,
         guard: Guard, now: datetime, ruling: Ruling | None = None) -> MovedCase:
    """The case moved by ``cmd.event``: the FSM's move from where it is, once ``guard`` admits
    it (a refusal by the guard leaves an audit row)."""
    assert case is not None, "a transition always runs on a locked case"
    status, version = CaseStatus(case["status"]), int(case["version"])
    accepted = allowed_move(status, version, cmd)
    correlation_id = correlation_of(cmd.correlation_id)
    try:
        digest = guard.admit(conn, case, cmd, version + 1, writes, ruling)
    except GuardFailed as refused:
        raise refuse(refused, move_row(
            cmd, now, correlation_id, outcome="refused", source=status, target=None,
            version=version, facts={"problems": refused.details.get("problems", [])},
            reason=refused.message)) from None
    return _record_move(case, cmd, accepted, digest, now, correlation_id, writes)


def allowed_move(status: CaseStatus, version: int, cmd: TransitionCase) -> Accepted:
    """The FSM's move for the event; refused when the case is not at the expected version
    or the event has no move from its status."""
    if cmd.expected_version is not None and cmd.expected_version != version:
        raise refuse(VersionConflict(
            f"case is at version {version}, not {cmd.expected_version}",
            expected_version=cmd.expected_version, version=version))
    decision = decide(status, cmd.event)
    if isinstance(decision, MoveRefused):
        raise refuse(IllegalTransition(decision.reason, status=str(status),
                                       event=str(cmd.event)))
    return decision


def _record_move(case: Row, cmd: TransitionCase, accepted: Accepted, digest: str | None,
                 now: datetime, correlation_id: str, writes: store.Writes) -> MovedCase:
    """Record the accepted move (the case row, its timeline entry, its outbox) and return
    the moved case's view."""
    version = int(case["version"]) + 1
    writes.moved_case = {"id": cmd.case_id, "status": str(accepted.target),
                         "version": version, "updated_at": now}
    facts = {} if digest is None else {"plan_hash": digest}
    writes.timeline = move_row(cmd, now, correlation_id, outcome="accepted",
                               source=accepted.source, target=accepted.target, version=version,
                               facts=facts, reason=cmd.reason)
    ctx = MoveContext(cmd.case_id, version, cmd.actor, correlation_id, digest, cmd.reason)
    writes.outbox = messages_for(accepted, ctx)
    view = case_view({**case, "status": str(accepted.target), "version": version,
                      "updated_at": now})
    # A move that concerns no plan names none: the case as it is (a MovedCase without the key).
    return cast(MovedCase, view) if digest is None else MovedCase(**view, plan_hash=digest)


def move_row(cmd: TransitionCase, now: datetime, correlation_id: str, *,
             outcome: Literal["accepted", "refused"], source: CaseStatus,
             target: CaseStatus | None, version: int, facts: Mapping[str, Any],
             reason: str | None) -> TimelineRow:
    """The timeline row of a move, accepted or refused."""
    return timeline_row(cmd.case_id, str(cmd.event), cmd.actor, reason, correlation_id, now,
                        outcome=outcome, source=str(source),
                        target=None if target is None else str(target), version=version,
                        facts={**facts, **cmd.attribution}, context=cmd.meta)
