"""What a metrics source answers (``MetricSource``: one value of a query, at a moment, over a
window) and the errors it raises when it cannot."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

from core.errors import InternalError

Worst = Literal["max", "min"]


class EvidenceMissing(InternalError):
    """A source could not produce a value (no data, NaN, unreachable): the check fails."""

    code = "evidence_missing"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class QueryTimedOut(EvidenceMissing):
    """Prometheus gave up on the query (its ``timeout``), or the answer did not come in time: a
    query to read again later, not at once."""

    code = "query_timed_out"


class QueryRefused(EvidenceMissing):
    """The query breaks the bounds (``core/domain/promql.py``): it is never sent."""

    code = "query_refused"


class MetricSource(Protocol):
    def read(self, query: str, *, over_s: float | None = None, worst: Worst = "max",
             at: datetime | None = None) -> float:
        """The value of ``query`` at ``at`` (default: now): the ``worst`` series, and with
        ``over_s`` its worst value over the ``over_s`` seconds ending at ``at``;
        ``EvidenceMissing`` when there is none."""
        ...
