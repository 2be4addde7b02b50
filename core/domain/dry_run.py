"""A plan's dry run as data: what each step would do, read from its target before anyone approves
(``core.steps.dry_run`` takes the readings), and the rules the ``plan_ready`` guard applies to
it. A step whose target answered no (no such deployment, a script off the allow-list) refuses the
plan; a step whose target could not answer says so ("not checked: …"), and never claims a check.

Also the plans that already failed on a case, read from its timeline: a plan identical to one of
them comes back to the gate only when a person asked for a retry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from core.domain.plans import ParsedPlan

Verdict = Literal["ok", "refused", "not_checked"]
VERDICTS: tuple[Verdict, ...] = ("ok", "refused", "not_checked")


@dataclass(frozen=True)
class DryRunLine:
    """One step's dry run: which step (``step``, its label), the verdict, and a sentence."""

    step: str
    verdict: Verdict
    says: str

    @property
    def text(self) -> str:
        """The line as people read it: "step 1 (k8s.rollout): not checked: …"."""
        lead = {"ok": "", "refused": "cannot run: ", "not_checked": "not checked: "}
        return f"{self.step}: {lead[self.verdict]}{self.says}"

    def fact(self) -> dict[str, str]:
        return {"step": self.step, "verdict": self.verdict, "says": self.says}

    @classmethod
    def of_fact(cls, fact: Mapping[str, Any]) -> DryRunLine | None:
        """A line read back from a timeline row; None when the row holds something else."""
        verdict = fact.get("verdict")
        for known in VERDICTS:
            if verdict == known:
                return cls(str(fact.get("step", "")), known, str(fact.get("says", "")))
        return None


@dataclass(frozen=True)
class DryRunReport:
    """The dry run of one plan (``digest``): a line per step, then per rollback step."""

    digest: str
    lines: tuple[DryRunLine, ...]

    @property
    def refused(self) -> tuple[DryRunLine, ...]:
        return tuple(line for line in self.lines if line.verdict == "refused")

    def reason(self) -> str:
        """Why the guard refuses the plan, in one sentence (the first refused step first)."""
        first, *rest = self.refused
        more = f" (and {len(rest)} more step(s) that cannot run)" if rest else ""
        return f"the plan cannot run as written: {first.text}{more}"

    def facts(self) -> list[dict[str, str]]:
        """The lines as a timeline row stores them (``dry_run`` of the ``plan_ready`` row)."""
        return [line.fact() for line in self.lines]

    @classmethod
    def of_facts(cls, digest: str, facts: object) -> DryRunReport | None:
        """A report read back from a timeline row's ``dry_run``; None when there is none."""
        if not isinstance(facts, list):
            return None
        lines = [DryRunLine.of_fact(f) for f in facts if isinstance(f, Mapping)]
        return cls(digest, tuple(line for line in lines if line is not None))


DryRun = Callable[[ParsedPlan], DryRunReport]
"""What reads a plan's targets and answers its dry run (``core.steps.dry_run.PlanDryRun``)."""


# -- plans that already failed ------------------------------------------------------------------

FAILED_EVENTS = ("exec_failed", "verify_failed")
"""The moves that say an approved plan failed: its steps, or its verification."""

_RETRY = re.compile(r"\b(?:retry|re-try|try (?:it |that |this )?again|same plan|run it again)\b",
                    re.IGNORECASE)


def asks_retry(words: str | None) -> bool:
    """Whether a person's words ask for the same plan again ("retry", "try again")."""
    return bool(words) and _RETRY.search(words or "") is not None


@dataclass(frozen=True)
class Attempt:
    """An approved plan that failed on the case: its hash, how (``event``) and why."""

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
    """Why the plan ``digest`` may not come to the gate again: it already failed on the case and
    nobody asked for a retry since; None when it may."""
    failed = [a for a in failed_attempts(rows) if a.plan_hash == digest]
    if not failed:
        return None
    resumed = last_resume(rows)
    if resumed is not None and resumed.retry:
        return None
    how = "its steps failed" if failed[-1].event == "exec_failed" else "its verification failed"
    return (f"this exact plan (hash {digest[:12]}) already failed on this case ({how}: "
            f"{failed[-1].reason[:200]}); propose a different plan, or a person asks for a "
            "retry (/case resume <id> retry)")
