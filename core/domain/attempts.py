"""A case's attempts, read from its timeline: the approved plans that failed (their steps, or
their verification), the plans a person rejected at the gate, and the person who re-opened
planning on the PARKED case with their words. The ``plan_ready`` guard refuses a plan identical
to one that failed or was rejected unless a person asked for a retry since; the planner tells the
model what failed or was rejected, why, and what the person said."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

FAILED_EVENTS = ("exec_failed", "verify_failed")
"""The moves that say an approved plan failed: its steps, or its verification."""
REJECTED = "gate_rejected"
"""The move that says a person rejected the plan at the gate."""

_RETRY = re.compile(r"\b(?:retry|re-try|try (?:it |that |this )?again|same plan|run it again)\b",
                    re.IGNORECASE)


def asks_retry(words: str | None) -> bool:
    """Whether a person's words ask for the same plan again ("retry", "try again")."""
    return bool(words) and _RETRY.search(words or "") is not None


@dataclass(frozen=True)
class Attempt:
    """A plan that did not help on the case: approved and failed (``exec_failed``,
    ``verify_failed``) or rejected at the gate (``gate_rejected``): its hash, how and why."""

    plan_hash: str
    event: str
    reason: str


@dataclass(frozen=True)
class Resumed:
    """A person re-opened planning on a PARKED case: who, their words, whether they asked for
    the same plan again."""

    actor: str
    words: str
    retry: bool


class Row(Protocol):
    """The fields of a timeline row these rules read (``core.cases.timeline.Entry`` has them)."""

    @property
    def event(self) -> str: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def plan_hash(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def actor(self) -> str: ...
    @property
    def context(self) -> Mapping[str, Any]: ...


def failed_attempts(rows: Iterable[Row]) -> list[Attempt]:
    """Each approved plan that then failed, oldest first: the plan of the last
    ``gate_approved`` before each accepted ``exec_failed``/``verify_failed``."""
    approved: str | None = None
    failed: list[Attempt] = []
    for row in rows:
        if row.outcome != "accepted":
            continue
        if row.event == "gate_approved":
            approved = row.plan_hash
        elif row.event in FAILED_EVENTS and approved is not None:
            failed.append(Attempt(approved, row.event, row.reason or ""))
    return failed


def rejected_attempts(rows: Iterable[Row]) -> list[Attempt]:
    """Each plan a person rejected at the gate, oldest first, with the reason they gave."""
    return [Attempt(row.plan_hash, REJECTED, row.reason or "") for row in rows
            if row.outcome == "accepted" and row.event == REJECTED and row.plan_hash]


def declined_attempts(rows: Sequence[Row]) -> list[Attempt]:
    """The plans that may not come back unasked: those that failed and those rejected."""
    return [*failed_attempts(rows), *rejected_attempts(rows)]


def last_resume(rows: Sequence[Row]) -> Resumed | None:
    """The latest accepted ``resume`` (or ``fix``) of the case, if it is the latest move back
    to planning; None when the case was not resumed."""
    for row in reversed(rows):
        if row.outcome != "accepted":
            continue
        if row.event in ("resume", "fix"):
            words = str(row.context.get("suggestion") or row.reason or "")
            retry = row.context.get("retry") is True or asks_retry(words)
            return Resumed(row.actor, words, retry)
        if row.event in ("plan_ready", "analysis_done"):
            return None
    return None


def repeat_refusal(digest: str, rows: Sequence[Row]) -> str | None:
    """Why the plan ``digest`` may not come to the gate again: it already failed on the case, or
    a person rejected it, and nobody asked for a retry since; None when it may."""
    declined = [a for a in declined_attempts(rows) if a.plan_hash == digest]
    if not declined:
        return None
    resumed = last_resume(rows)
    if resumed is not None and resumed.retry:
        return None
    last = declined[-1]
    if last.event == REJECTED:
        said = f" (\"{last.reason[:200]}\")" if last.reason else ""
        what = f"was rejected at the gate on this case{said}"
    else:
        how = "its steps failed" if last.event == "exec_failed" else "its verification failed"
        what = f"already failed on this case ({how}: {last.reason[:200]})"
    return (f"this exact plan (hash {digest[:12]}) {what}; propose a different plan, or a "
            "person asks for a retry (/case resume <id> retry)")


@dataclass(frozen=True)
class Replan:
    """What a planning turn after a resume starts from: who re-opened it and their words, why the
    case parked (the move and its reason), the plan that failed or was rejected when the case
    parked on it, and every plan the case declined so far (failed or rejected)."""

    resumed: Resumed
    parked_by: str
    parked_because: str
    failed: Attempt | None
    declined: tuple[Attempt, ...] = ()


def replan_of(rows: Sequence[Row]) -> Replan | None:
    """The replan the case is in, when its latest move back to planning was a person's resume;
    None otherwise (a first plan)."""
    resumed = last_resume(rows)
    if resumed is None:
        return None
    parked = next((row for row in reversed(rows)
                   if row.outcome == "accepted" and row.event not in ("resume", "fix")), None)
    attempts = failed_attempts(rows)
    failed = attempts[-1] if attempts and parked is not None \
        and parked.event in FAILED_EVENTS else None
    if parked is not None and parked.event == REJECTED and parked.plan_hash:
        failed = Attempt(parked.plan_hash, REJECTED, parked.reason or "")
    return Replan(resumed, "" if parked is None else parked.event,
                  "" if parked is None else parked.reason or "", failed,
                  tuple(declined_attempts(rows)))
