"""A case's timeline read through typed shapes: each row's meta (the move: outcome, from, to,
version, plan hash; a refusal's problems; a yes: the approvers so far; who a request stated; a
note's facts) is read once here into an ``Entry``, so no reader keys into the free-form JSON the
service stores. ``accepted_moves`` reads only the moves a case made, whatever else it holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from uuid import UUID

from sqlalchemy import Connection

from core.db import case_store as store
from core.domain.attempts import FAILED_EVENTS, REJECTED, declined_attempts
from core.domain.fsm import CaseEvent
from core.domain.views import TimelineEntry

MOVED = ("opened", "accepted")
"""The outcomes of a row that moved the case (its ``to`` is where the case went)."""

F = TypeVar("F", bound=Mapping[str, object])


@dataclass(frozen=True)
class Entry:
    """One timeline row, its meta read once. ``context`` holds a note's facts (``NoteCase.meta``)
    or a move's caller context; ``facts_as`` reads them as the shape their event has."""

    event: str
    actor: str
    reason: str | None
    at: str | None  # ISO 8601, UTC
    outcome: str | None  # opened, note, accepted or refused
    source: str | None  # the status the row found ("from")
    target: str | None  # the status it left ("to"; None when refused)
    version: int | None  # the case's version it left
    plan_hash: str | None  # the plan a move concerns (the gate's, the plan_ready's)
    approvers: tuple[str, ...] = ()  # a yes that is not yet enough: the yeses so far
    needs: int | None = None  # …and how many more it needed then
    stated_actor: str | None = None  # the actor a principal's request stated
    problems: tuple[str, ...] = ()  # a refused row's: what was wrong with the request
    dry_run: tuple[Mapping[str, Any], ...] = ()  # a plan_ready's: each step's dry run
    context: Mapping[str, Any] = field(default_factory=dict)
    id: int = 0
    correlation_id: str | None = None

    @property
    def moved(self) -> bool:
        """Whether the row opened or moved the case."""
        return self.outcome in MOVED

    @property
    def accepted(self) -> bool:
        return self.outcome == "accepted"

    @property
    def noted(self) -> bool:
        return self.outcome == "note"

    @property
    def shown_actor(self) -> str:
        """The row's actor as people read it: ``svc-ci for sre@acme`` when the request stated
        another actor than the principal that made it."""
        return f"{self.actor} for {self.stated_actor}" if self.stated_actor else self.actor

    @property
    def facts(self) -> Mapping[str, Any]:
        """What the row says besides the move: its context, with the move's plan hash when the
        context names none."""
        if self.plan_hash and "plan_hash" not in self.context:
            return {**self.context, "plan_hash": self.plan_hash}
        return self.context

    def facts_as(self, shape: type[F]) -> F:
        """The row's facts read as the shape its event writes (``core.domain.messages``), as
        ``payload_as`` reads an outbox payload: ``mypy`` checks every key a reader reads."""
        return facts_as(self.facts, shape)

    @property
    def noted_plan(self) -> str | None:
        """The plan a note's facts name (its context's plan hash); None when they name none."""
        return _text(self.context.get("plan_hash"))

    @property
    def plan_named(self) -> str:
        """The plan the row names (the move's, else its facts'); empty when none."""
        return self.plan_hash or str(self.context.get("plan_hash") or "")

    def about(self, digest: str | None) -> bool:
        """Whether the row concerns the plan ``digest``: a row that names no plan concerns
        any."""
        if "plan_hash" in self.context:
            return bool(self.context["plan_hash"] == digest)
        return not self.plan_hash or self.plan_hash == digest


def entry_of(row: TimelineEntry | Mapping[Any, Any]) -> Entry:
    """A timeline row (``CaseService.timeline``'s, or a ``case_timeline`` row) read once."""
    meta: Mapping[str, Any] = row.get("meta") or {}
    context = meta.get("context")
    version, needs = meta.get("version"), meta.get("needs")
    return Entry(
        event=str(row["event"]), actor=str(row["actor"]), reason=row.get("reason"),
        at=_text(row.get("created_at")), outcome=_text(meta.get("outcome")),
        source=_text(meta.get("from")), target=_text(meta.get("to")),
        version=None if version is None else int(version),
        plan_hash=_text(meta.get("plan_hash")),
        approvers=tuple(str(a) for a in meta.get("approvers") or ()),
        needs=None if needs is None else int(needs),
        stated_actor=_text(meta.get("stated_actor")),
        problems=tuple(str(p) for p in meta.get("problems") or ()),
        dry_run=tuple(line for line in meta.get("dry_run") or () if isinstance(line, Mapping)),
        context=context if isinstance(context, Mapping) else {},
        id=int(row.get("id") or 0), correlation_id=row.get("correlation_id"))


def entries_of(rows: Iterable[TimelineEntry | Mapping[Any, Any]]) -> tuple[Entry, ...]:
    return tuple(entry_of(row) for row in rows)


MOVE_EVENTS = tuple(str(event) for event in CaseEvent)


def accepted_moves(conn: Connection, case_id: UUID) -> tuple[Entry, ...]:
    """The case's accepted moves, oldest first: one row per version, read by event through an
    index, so a rule over them (a plan that failed, the last resume) costs the same beside ten
    notes or ten thousand."""
    return entries_of(store.timeline_events(conn, case_id, MOVE_EVENTS, outcomes=("accepted",)))


ATTEMPT_EVENTS = ("gate_approved", *FAILED_EVENTS)
"""The moves ``failed_attempts`` reads: a plan approved, and its steps or checks failing."""
BACK_TO_PLANNING = ("resume", "fix", "plan_ready", "analysis_done")
"""The moves ``last_resume`` reads: the latest of them says whether a person re-opened planning."""


def attempt_moves(conn: Connection, case_id: UUID, digest: str) -> tuple[Entry, ...]:
    """The case's accepted moves that ``repeat_refusal`` judges the plan ``digest`` by, oldest
    first, and no others: the approvals and failures (one pair per run of a plan), the latest
    rejection of ``digest`` at the gate, and, only when ``digest`` was declined, the latest move
    back to planning. ``repeat_refusal`` answers over them what it answers over every accepted
    move, whether the case went round the gate ten times or ten thousand."""
    accepted = ("accepted",)
    attempts = entries_of(store.timeline_events(conn, case_id, ATTEMPT_EVENTS,
                                                outcomes=accepted))
    rejected = entries_of(store.timeline_events(conn, case_id, (REJECTED,), outcomes=accepted,
                                                plan_hash=digest, latest=1))
    moves = tuple(sorted((*attempts, *rejected), key=lambda entry: entry.id))
    if not any(attempt.plan_hash == digest for attempt in declined_attempts(moves)):
        return moves
    last = store.timeline_events(conn, case_id, BACK_TO_PLANNING, outcomes=accepted, latest=1)
    return tuple(sorted((*moves, *entries_of(last)), key=lambda entry: entry.id))


def facts_as(facts: Mapping[str, Any], shape: type[F]) -> F:
    """A note's facts (a row's, or a ``NoteCase.meta`` before it is written) read as the shape
    its event writes (``core.domain.messages``)."""
    return cast(F, facts)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
