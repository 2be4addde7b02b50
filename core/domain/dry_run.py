"""A plan's dry run as data: what each step would do, read from its target before anyone approves
(``core.steps.dry_run`` takes the readings), and the rules the ``plan_ready`` guard applies to
it. A step whose target answered no (no such deployment, a script off the allow-list) refuses the
plan; a step whose target could not answer says so ("not checked: …"), and never claims a check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

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
