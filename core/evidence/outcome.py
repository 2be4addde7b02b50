"""What one reading of a ``verify`` block says: held, pending (read again) or cannot (never
judgeable), with the one line the timeline shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["held", "pending", "cannot"]


@dataclass(frozen=True)
class VerifyOutcome:
    """One reading: ``held`` (the condition holds), ``pending`` (not yet, or not now: read again
    until the deadline) or ``cannot`` (the block can never be judged: fail at once)."""

    state: State
    reason: str  # one line for the timeline: what was observed against what was required
    observed: float | None = None  # the metric value, or the probe's HTTP status
    waiting_for: str | None = None  # pending: the condition not yet seen to hold, in words
    timed_out: bool = False  # pending because Prometheus (or the wait for it) timed out

    @property
    def passed(self) -> bool:
        return self.state == "held"


def cannot(why: str) -> VerifyOutcome:
    """A block that can never be judged: the reading fails at once, saying why."""
    return VerifyOutcome("cannot", f"cannot verify: {why}")
