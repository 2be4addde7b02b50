"""A plan's verify checks read before any change: each metric check's value now and whether it
already holds. A check that holds before the change cannot show that the change worked: the
plan message says so beside the check, and the agent is told once (in propose_plan's answer) so
it can tighten it. Nothing is refused for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.domain.verify import MetricCheck, parse_verify
from core.errors import InvalidPlan
from core.evidence.scope import for_case
from core.evidence.sources import EvidenceMissing, MetricSource
from core.evidence.stand_in import StaticSource


@dataclass(frozen=True)
class CheckReading:
    """One metric check read now: its value (the worst series), whether the check already holds,
    and whether a stand-in table said so."""

    index: int
    metric: str
    value: float
    holds: bool
    bounds: str  # "below 0.5", "below 10 and above 2"
    stand_in: bool = False

    @property
    def said(self) -> str:
        """"p95 = 0.388 now, below 0.5" (or "…, not below 0.5")."""
        verdict = self.bounds if self.holds else f"not {self.bounds}"
        return f"{self.metric} = {self.value:g} now, {verdict}"

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.index, "metric": self.metric, "now": self.value,
                "holds_already": self.holds, "stand_in": self.stand_in}


def read_before(verify: Any, source: MetricSource | None, scope: str | None,
                at: datetime | None = None) -> list[CheckReading]:
    """Every metric check of ``verify`` that ``source`` can read now (none without a source or
    a block that cannot be parsed; a check it cannot read is left out)."""
    if source is None:
        return []
    try:
        block = parse_verify(verify)
    except InvalidPlan:
        return []
    scoped = for_case(source, scope)
    stand_in = isinstance(source, StaticSource)
    return [reading for n, check in enumerate(block.checks) if isinstance(check, MetricCheck)
            for reading in _read(n, check, scoped, at, stand_in)]


def _read(index: int, check: MetricCheck, source: MetricSource, at: datetime | None,
          stand_in: bool) -> list[CheckReading]:
    bounds = (("below", check.below), ("above", check.above))
    value: float | None = None
    holds = True
    for bound, limit in bounds:
        if limit is None:
            continue
        try:
            seen = source.read(check.metric, worst="max" if bound == "below" else "min", at=at)
        except EvidenceMissing:
            return []
        value = seen if value is None else value
        holds = holds and (seen < limit if bound == "below" else seen > limit)
    if value is None:
        return []
    return [CheckReading(index, check.metric, value, holds, check.bounds(), stand_in)]


def holding_already(readings: Sequence[CheckReading]) -> list[CheckReading]:
    return [reading for reading in readings if reading.holds]


def tell_the_model(readings: Sequence[CheckReading]) -> str | None:
    """What the agent is told once about checks that already hold; None when none does."""
    held = holding_already(readings)
    if not held:
        return None
    which = "; ".join(f"check {r.index + 1} ({r.said})" for r in held)
    return (f"verify holds already before any change: {which}. A check that holds now cannot "
            "show that the change worked; the plan waits at the gate as proposed, but consider "
            "proposing it again with a bound the incident breaks.")
