"""The stand-in metrics source: a table of values by metric name (``OPSGATE_STATIC_METRICS``),
optionally reacting to the approved change; every verdict read from it is labelled ``STAND_IN``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from core.evidence.sources import EvidenceMissing, Worst

STAND_IN = "stand-in readings (OPSGATE_STATIC_METRICS)"
"""The label of every verdict read from a stand-in table: the timeline, thread and card say it."""
STAND_IN_SETTLE_S = 60.0
"""How long after the change a reacting stand-in still reads its before-change values (times
``OPSGATE_VERIFY_TIME_SCALE``): a change takes a moment to show in the metrics."""


class StaticSource:
    """A stand-in table by metric name (``OPSGATE_STATIC_METRICS``). Alone, a constant: time
    windows change nothing. With ``before_change`` it reacts to the approved change, as the
    eval's two-world series do (``agent/eval/series.py``): those values until ``settle_s`` after
    the change it is bound to (``after_change``; unbound, the change has not happened), the
    table's after; a window spanning both reads the worse."""

    def __init__(self, values: Mapping[str, float],
                 before_change: Mapping[str, float] | None = None, *, settle_s: float = 0.0,
                 changed_at: datetime | None = None) -> None:
        self._values = dict(values)
        self._before = dict(before_change or {})
        self._settle = timedelta(seconds=settle_s)
        self._changed_at = changed_at

    def after_change(self, changed_at: datetime) -> StaticSource:
        """The same table, reading the world after the change that finished at ``changed_at``."""
        return StaticSource(self._values, self._before, settle_s=self._settle.total_seconds(),
                            changed_at=changed_at)

    def read(self, query: str, *, over_s: float | None = None, worst: Worst = "max",
             at: datetime | None = None) -> float:
        if query not in self._values:
            raise EvidenceMissing(f"no value for {query!r} in the stand-in table "
                                  "(OPSGATE_STATIC_METRICS)")
        if query not in self._before:
            return self._values[query]
        seen = []
        end = at or datetime.now(UTC)
        settled = None if self._changed_at is None else self._changed_at + self._settle
        if settled is None or end - timedelta(seconds=over_s or 0.0) < settled:
            seen.append(self._before[query])
        if settled is not None and end >= settled:
            seen.append(self._values[query])
        return max(seen) if worst == "max" else min(seen)
