"""Time as the code reads it: a clock is a function returning the current UTC datetime. The
real one is the default everywhere; tests pass one they move, so leases expire without waiting."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)
