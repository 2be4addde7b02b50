"""What the case card and the catch-up are drawn from (``CaseState``: the case's ``CaseProgress``
and the approval policy's numbers and words), and what they derive from it: each step's line
state, the quorum's progress, what the case waits on. ``bot.card`` draws; nothing here writes
mrkdwn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.people import Names, as_is
from core.cases.progress import (
    ALERT_EVENTS,
    FINDINGS_EVENTS,
    LATEST,
    CaseProgress,
    Reading,
    StepAttempt,
)
from core.cases.timeline import Entry
from core.domain.views import CaseView

LISTED = LATEST  # findings, alerts and pins shown at most

StepMark = Literal["done", "failed", "retried", "running", "waiting"]


@dataclass(frozen=True)
class CaseState:
    """What the card and the catch-up are rendered from."""

    progress: CaseProgress
    needs: int = 1  # distinct approvers the plan needs
    approvers: str = "anyone but the requester"  # who may approve, in mrkdwn (people mentioned)
    working: str | None = None  # "… is working on it" while the agent works
    touches: str | None = None  # the case's components and their owners, in words
    last_change: str | None = None  # the components' last change before the case opened
    names: Names = as_is  # how a person's id reads in texts (their display name)

    @property
    def case(self) -> CaseView:
        return self.progress.case

    @property
    def status(self) -> str:
        return self.progress.status

    @property
    def entries(self) -> tuple[Entry, ...]:
        return self.progress.entries

    @property
    def yeses(self) -> tuple[str, ...]:
        """The yeses recorded for the plan at the gate, by its approval rows."""
        gate = self.progress.gate
        return () if gate is None else gate.recorded

    @property
    def more_needed(self) -> int:
        """How many more yeses the plan at the gate waits for (at least one)."""
        return max(self.needs - len(self.yeses), 1)


@dataclass(frozen=True)
class StepLine:
    """One line of the card's steps: a plan step with its latest attempt, or a rollback step
    that ran."""

    mark: StepMark
    index: int
    action: str | None
    attempt: StepAttempt | None = None  # None: not run yet


def attempt_mark(attempt: StepAttempt) -> StepMark:
    """✓ done, ↻ to be retried, ✗ failed for good."""
    if attempt.ok:
        return "done"
    return "retried" if (attempt.attempt or 1) < (attempt.attempts_allowed or 1) else "failed"


def step_lines(state: CaseState) -> list[StepLine]:
    """Each plan step with its latest attempt; the first not run yet is running while the
    case executes and every step before it succeeded."""
    lines, running = [], state.status == "EXECUTING"
    for step in state.progress.steps:
        done = step.latest
        if done is not None:
            lines.append(StepLine(attempt_mark(done), step.index, step.action, done))
            running = running and done.ok
            continue
        lines.append(StepLine("running" if running else "waiting", step.index, step.action))
        running = False
    return lines


def findings_entry(state: CaseState) -> Entry | None:
    """The latest findings the analysis noted."""
    found = [e for e in state.entries if e.event in FINDINGS_EVENTS]
    return found[-1] if found else None


def moved_on_reason(state: CaseState) -> str | None:
    """Why the analysis moved on without findings (its latest reason)."""
    moved = [e for e in state.entries if e.event == "analysis_done" and e.reason]
    return moved[-1].reason if moved else None


def alert_entries(state: CaseState) -> list[Entry]:
    """The latest alert notes the card lists."""
    return [e for e in state.entries if e.event in ALERT_EVENTS][-LISTED:]


def waiting_reading(state: CaseState) -> Reading | None:
    """The latest reading of a verification that is not concluded yet."""
    if state.progress.verdict is not None or not state.progress.readings:
        return None
    return state.progress.readings[-1]


def opened_entry(state: CaseState) -> Entry | None:
    return next((e for e in state.entries if e.event == "case_opened"), None)
