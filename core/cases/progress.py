"""``CaseProgress``: one case as its readers show it — the case, its current plan parsed once,
where the gate stands, the plan's steps and their attempts, verification readings, the outcome
and the pins — built once from the case's timeline and latest plan (``progress_of``);
``CaseService.progress`` reads it in one go, from the rows ``progress_rows`` picks: a bounded
read whatever the timeline's length. A typed read model: no reader keys into meta."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, RowMapping

from core.cases.approvals import GateStatus
from core.cases.timeline import MOVE_EVENTS, MOVED, Entry, entries_of
from core.chat import PINNED_EVENT
from core.db import case_store as store
from core.domain.messages import ChatPinnedFacts, StepResultFacts, VerifyWaitingFacts
from core.domain.plans import ParsedPlan, parsed_or_none
from core.domain.views import CaseView, ProposedPlan, TimelineEntry

STEP_EVENTS = ("step_result", "rollback_result")
ENDS = ("CLOSED", "PARKED")
PLAN_EVENTS = (*STEP_EVENTS, "verify_reading", "verify_result", "plan_approval")
"""The rows about the current plan: its steps' attempts, its readings, its yeses and refusals."""
FINDINGS_EVENTS = ("analysis_findings", "findings")
ALERT_EVENTS = ("alert_firing", "alert_new", "alert_resolved", "alert_recurrence")
LATEST = 3  # findings and alert notes a reader lists at most: the latest
TAIL = 20  # the case's last rows, whatever they are: the latest events a reader lists


@dataclass(frozen=True)
class CurrentPlan:
    """The case's latest proposed plan: as stored, and read once by the one plan parser."""

    plan_hash: str
    proposed_by: str | None
    case_version: int | None
    plan: Mapping[str, Any]  # the stored ChangePlan JSON
    parsed: ParsedPlan | None  # None when it no longer meets the contract

    @property
    def title(self) -> str | None:
        if self.parsed is not None:
            return self.parsed.title
        title = self.plan.get("title")
        return None if title is None else str(title)

    @property
    def risk_score(self) -> Any:
        """The risk the plan states (None when it states none: the policy reads it as the
        riskiest, ``parsed.risk``)."""
        return self.plan.get("risk_score")

    @property
    def step_actions(self) -> tuple[str | None, ...]:
        """Each plan step's action, in order."""
        if self.parsed is not None:
            return tuple(str(step.action) for step in self.parsed.steps)
        steps = self.plan.get("steps") or []
        return tuple(None if not isinstance(step, Mapping) or step.get("action") is None
                     else str(step["action"]) for step in steps)


def current_plan(proposed: ProposedPlan | Mapping[Any, Any]) -> CurrentPlan:
    """The plan ``proposed`` (a ``ProposedPlan``, or its ``plan_proposed`` row), read once."""
    plan: Mapping[str, Any] = proposed["plan"]
    version, by = proposed.get("case_version"), proposed.get("proposed_by")
    return CurrentPlan(str(proposed["plan_hash"]), None if by is None else str(by),
                       None if version is None else int(version), plan, parsed_or_none(plan))


@dataclass(frozen=True)
class StepAttempt:
    """One attempt of a plan or rollback step, as the executor noted it (``StepResultFacts``);
    a fact the note does not carry is None."""

    phase: str | None
    step: int
    attempt: int | None
    attempts_allowed: int | None
    action: str | None
    ok: bool
    duration_s: float | None
    refused: str | None
    summary: str | None  # the note's reason: "step 2 (noop): …"
    at: str | None


def attempt_of(entry: Entry) -> StepAttempt:
    facts = entry.facts_as(StepResultFacts)
    phase, action, took = facts.get("phase"), facts.get("action"), facts.get("duration_s")
    attempt, allowed = facts.get("attempt"), facts.get("attempts_allowed")
    return StepAttempt(
        phase=None if phase is None else str(phase), step=int(facts.get("step") or 0),
        attempt=None if attempt is None else int(attempt),
        attempts_allowed=None if allowed is None else int(allowed),
        action=None if action is None else str(action), ok=bool(facts.get("ok")),
        duration_s=took if isinstance(took, int | float) else None,
        refused=facts.get("refused"), summary=entry.reason, at=entry.at)


@dataclass(frozen=True)
class StepProgress:
    """One step of the current plan and its attempts so far, oldest first."""

    index: int
    action: str | None
    attempts: tuple[StepAttempt, ...]

    @property
    def latest(self) -> StepAttempt | None:
        return self.attempts[-1] if self.attempts else None


@dataclass(frozen=True)
class Reading:
    """One verification reading as the verifier noted it (``verify_reading`` waits,
    ``verify_result`` concludes)."""

    reading: int
    passed: bool
    observed: float | None
    waiting_for: str | None
    reason: str | None  # what the reading saw, in words
    stand_in: bool
    next_reading_at: str | None
    deadline: str | None
    said: str | None  # the note's reason
    at: str | None


def reading_of(entry: Entry) -> Reading:
    facts = entry.facts_as(VerifyWaitingFacts)
    number, observed = facts.get("reading", 1), facts.get("observed")
    return Reading(
        reading=int(number) if isinstance(number, int | float) else 1,
        passed=bool(facts.get("passed")),
        observed=observed if isinstance(observed, int | float) else None,
        waiting_for=facts.get("waiting_for"), reason=facts.get("reason"),
        stand_in=bool(facts.get("stand_in")), next_reading_at=facts.get("next_reading_at"),
        deadline=facts.get("deadline"), said=entry.reason, at=entry.at)


@dataclass(frozen=True)
class Pin:
    """A chat message pinned to the case (``message_pinned``)."""

    author: str | None
    permalink: str | None
    said: str | None  # what the message said, in words
    at: str | None


def pin_of(entry: Entry) -> Pin:
    facts = entry.facts_as(ChatPinnedFacts)
    author, permalink = facts.get("author"), facts.get("permalink")
    return Pin(None if author is None else str(author),
               None if permalink is None else str(permalink), entry.reason, entry.at)


@dataclass(frozen=True)
class CaseProgress:
    """One case as every reader shows it. ``gate`` is where the gate stands for the current
    plan by its approval rows (None without a plan, or when built from rows alone)."""

    case: CaseView
    entries: tuple[Entry, ...]  # the timeline's rows it was built from, oldest first
    plan: CurrentPlan | None = None
    gate: GateStatus | None = None

    @cached_property
    def status(self) -> str:
        """Where the timeline last moved the case (the case row's status before any move)."""
        moved = next((e for e in reversed(self.entries) if e.moved and e.target), None)
        return moved.target if moved and moved.target else str(self.case.get("status") or "NEW")

    @property
    def plan_hash(self) -> str | None:
        return None if self.plan is None else self.plan.plan_hash

    @cached_property
    def since_proposed(self) -> tuple[Entry, ...]:
        """The entries since the current plan was proposed (a plan proposed again after a
        resume starts afresh, even with the same hash); none before any proposal."""
        start = next((n for n in range(len(self.entries) - 1, -1, -1)
                      if _proposal(self.entries[n])), None)
        return () if start is None else self.entries[start:]

    def of_plan(self, *events: str) -> list[Entry]:
        """The entries of ``events`` about the current plan since it was proposed."""
        return [e for e in self.since_proposed if e.event in events and e.about(self.plan_hash)]

    @cached_property
    def steps(self) -> tuple[StepProgress, ...]:
        """Each step of the current plan with its attempts (none yet: not run)."""
        if self.plan is None:
            return ()
        attempts = [attempt_of(e) for e in self.of_plan(*STEP_EVENTS)]
        return tuple(StepProgress(n, action, tuple(
            a for a in attempts if (a.phase or "step") == "step" and a.step == n))
            for n, action in enumerate(self.plan.step_actions))

    @cached_property
    def rollbacks(self) -> tuple[StepAttempt, ...]:
        """The latest attempt of each rollback step that ran, in order."""
        latest = {((a.phase or "step"), a.step): a
                  for a in (attempt_of(e) for e in self.of_plan(*STEP_EVENTS))}
        return tuple(latest[key] for key in sorted(latest) if key[0] != "step")

    @cached_property
    def readings(self) -> tuple[Reading, ...]:
        """The current plan's verification readings that wait, oldest first."""
        return tuple(reading_of(e) for e in self.of_plan("verify_reading"))

    @cached_property
    def verdict(self) -> Reading | None:
        """The reading that concluded the current plan's verification; None before."""
        concluded = self.of_plan("verify_result")
        return reading_of(concluded[-1]) if concluded else None

    @cached_property
    def outcome(self) -> Entry | None:
        """The move that closed or parked the case, while it is closed or parked."""
        if self.status not in ENDS:
            return None
        return next((e for e in reversed(self.entries)
                     if e.target == self.status and e.accepted), None)

    @cached_property
    def pins(self) -> tuple[Pin, ...]:
        return tuple(pin_of(e) for e in self.entries if e.event == PINNED_EVENT)


def progress_of(case: CaseView, rows: Iterable[TimelineEntry | Mapping[str, Any]],
                plan: ProposedPlan | Mapping[Any, Any] | None = None,
                gate: GateStatus | None = None) -> CaseProgress:
    """The progress of ``case`` from its timeline ``rows`` and its latest proposed ``plan``."""
    return CaseProgress(case, entries_of(rows), None if plan is None else current_plan(plan),
                        gate)


def progress_rows(conn: Connection, case_id: UUID) -> list[RowMapping]:
    """The timeline rows a case's progress is built from, oldest first: its opening and its
    moves, the current plan's rows since its ``plan_ready``, its pins, the latest findings and
    alert notes, and its last ``TAIL`` rows. Each read by event through an index: the same
    few rows beside ten notes or ten thousand (an alert group's)."""
    moves = store.timeline_events(conn, case_id, (*MOVE_EVENTS, "case_opened"), outcomes=MOVED)
    proposed = [row["id"] for row in moves if row["event"] == "plan_ready"]
    picked = [*moves, *store.timeline_events(conn, case_id, (PINNED_EVENT,)),
              *store.timeline_events(conn, case_id, FINDINGS_EVENTS, latest=LATEST),
              *store.timeline_events(conn, case_id, ALERT_EVENTS, latest=LATEST),
              *store.timeline_tail(conn, case_id, TAIL)[0]]
    if proposed:
        picked += store.timeline_events(conn, case_id, PLAN_EVENTS, since_id=proposed[-1])
    return sorted({row["id"]: row for row in picked}.values(), key=lambda row: row["id"])


def latest_plan_hash(entries: Sequence[Entry]) -> str | None:
    """The hash of the plan the case's latest accepted ``plan_ready`` proposed."""
    latest = next((e for e in reversed(entries) if _proposal(e)), None)
    return None if latest is None else latest.plan_hash or None


def _proposal(entry: Entry) -> bool:
    return entry.event == "plan_ready" and entry.accepted
