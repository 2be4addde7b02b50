"""What a reading is relative to: its moment (when it is taken, since when the change finished,
at what clock scale) and the source as it reads for one case and after one change."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from core.domain.promql import Labels
from core.evidence.prometheus import PrometheusSource
from core.evidence.sources import MetricSource
from core.evidence.stand_in import StaticSource


@dataclass(frozen=True)
class Moment:
    """When a reading is taken (``at``; None: the source's now) and when the change it judges
    finished (``since``; None: windows are judged as they stand, whatever came before).
    ``scale`` multiplies every window (the demo's fast clock; 1 in production)."""

    at: datetime | None = None
    since: datetime | None = None
    scale: float = 1.0

    def elapsed_s(self) -> float:
        if self.at is None or self.since is None:
            return math.inf
        return (self.at - self.since).total_seconds()


def for_case(source: MetricSource, scope: str | None,
             components: tuple[Labels, ...] | None = None) -> MetricSource:
    """``source`` as it reads for a case whose scope value (its tenant) is ``scope`` and whose
    components' metric labels are ``components`` (None: no component rule; empty: no metric
    check is read): Prometheus checks each query against them; a stand-in table sends no
    query."""
    if isinstance(source, PrometheusSource):
        return source.scoped(scope, components)
    return source


def after_change(source: MetricSource, changed_at: datetime) -> MetricSource:
    """``source`` as it reads the world after the change that finished at ``changed_at``: a
    stand-in table reacts to it; a real source needs no telling."""
    return source.after_change(changed_at) if isinstance(source, StaticSource) else source
