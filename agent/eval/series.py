"""A scenario's metrics over time, in two worlds: ``before`` (nobody fixes anything: the
incident goes on) and ``after`` (the right change lands at ``FIX_AT_S``). The analyst reads the
recorded points up to the moment the case is analysed (``write_recorded``); the verifier judges
a plan's ``verify`` block in both worlds (``verify_detects``) through ``SeriesSource``, a
``core.evidence.sources.MetricSource`` that honours time windows, so a block that would pass
before the fix could show is caught.

Times are seconds from the incident's start (the case's opening); values are deterministic
(noise seeded by scenario, metric and time)."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from agent.eval.scenarios import Series, within
from core.domain.verify import VerifyBlock, parse_verify
from core.errors import InvalidPlan
from core.evidence.reading import read_block
from core.evidence.scope import Moment
from core.evidence.sources import EvidenceMissing, Worst
from core.outbound.allowlists import UrlAllowList
from core.settings import Settings

STEP_S = 60
RECORDED_FROM_S = -3600  # the analyst's view: an hour before the incident ...
RECORDED_TO_S = 600  # ... to ten minutes into it
FIX_AT_S = 1800  # when the change lands in the ``after`` world
POLL_S = 30  # how often the verifier reads
MAX_WAIT_S = 3600  # the longest a verify block is read for
World = Literal["before", "after"]


def value_at(scenario: str, metric: str, series: Series, t: float, world: World) -> float:
    """The metric's value ``t`` seconds after the incident started, in ``world``."""
    if world == "after" and t >= FIX_AT_S:
        base = series.value_fixed()
    else:
        base = _incident_value(series, t)
    seed = zlib.crc32(f"{scenario}/{metric}/{int(t)}".encode())
    wobble = (seed % 2001) / 1000.0 - 1.0  # in [-1, 1]
    return max(0.0, base * (1.0 + series.noise * wobble))


def _incident_value(series: Series, t: float) -> float:
    incident = series.normal if series.incident is None else series.incident
    ended = series.ends_s is not None and t >= series.ends_s
    if series.shape == "flat" or t < series.starts_s or ended:
        return series.normal
    if series.shape == "ramp" and series.starts_s < 0 and t < 0:
        share = (t - series.starts_s) / -series.starts_s
        return series.normal + (incident - series.normal) * share
    return incident


def write_recorded(folder: Path, scenario: str, series: Mapping[str, Series]) -> None:
    """``<folder>/<metric>.json`` as ``core.analysis.sources.RecordedSource`` reads them; each
    file lands in ``folder`` (a metric's name is a plain name, checked again here)."""
    folder.mkdir(parents=True, exist_ok=True)
    for metric, shape in series.items():
        points = [[t, round(value_at(scenario, metric, shape, t, "before"), 6)]
                  for t in range(RECORDED_FROM_S, RECORDED_TO_S + 1, STEP_S)]
        doc = {"metric": metric, "step_s": STEP_S, "points": points}
        within(folder, folder / f"{metric}.json").write_text(json.dumps(doc), "utf-8")


def with_stand_in(settings: Settings, series: Mapping[str, Series]) -> Settings:
    """``settings`` with the scenario's two worlds as its stand-in metrics
    (``OPSGATE_STATIC_METRICS`` and its before-change values): the run's metric checks have a
    source, as the grade's have (``SeriesSource``)."""
    return settings.model_copy(update={
        "static_metrics": {m: shape.value_fixed() for m, shape in series.items()},
        "static_metrics_before_change": {m: _incident_value(shape, FIX_AT_S - STEP_S)
                                         for m, shape in series.items()}})


@dataclass(frozen=True)
class SeriesSource:
    """The verifier's metric source for one world: ``read`` answers the worst value over the
    window ending at ``at`` (samples every ``STEP_S``), by metric name, as Prometheus does
    (``tests/integration/eval/test_eval_series.py`` holds the two to the same answers)."""

    scenario: str
    series: Mapping[str, Series]
    world: World
    origin: datetime

    def read(self, query: str, *, over_s: float | None = None, worst: Worst = "max",
             at: datetime | None = None) -> float:
        metric = _recorded_name(query)
        shape = self.series.get(metric)
        if shape is None:
            raise EvidenceMissing(f"no series {query.strip()[:80]!r} was recorded")
        end = ((at or self.origin) - self.origin).total_seconds()
        # As Prometheus answers ``max_over_time((m)[W:])``: every instant of [end - W, end]
        # sees the latest sample at or before it, so the sample before the window counts too.
        start = end - (over_s or 0.0)
        first, last = int(start - start % STEP_S), int(end - end % STEP_S)
        values = [value_at(self.scenario, metric, shape, t, self.world)
                  for t in range(first, last + 1, STEP_S)]
        return max(values) if worst == "max" else min(values)


_SELECTOR = re.compile(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^{}]*\})?\s*")


def _recorded_name(query: str) -> str:
    """The recorded series a query reads: a metric's name, alone or with the component's
    labels (``http_5xx_ratio{service="checkout"}``: every recorded series is the component's);
    any other query as written (no such series)."""
    selector = _SELECTOR.fullmatch(query)
    return selector.group(1) if selector else query.strip()


@dataclass(frozen=True)
class Detection:
    """How a verify block fares: whether it ever holds after the fix and before it."""

    holds_after: bool
    holds_before: bool
    reason: str

    @property
    def detects_fix(self) -> bool:
        return self.holds_after and not self.holds_before


def verify_detects(verify: Any, scenario: str, series: Mapping[str, Series]) -> Detection:
    """Read ``verify`` every ``POLL_S`` from the fix to its deadline, in both worlds."""
    try:
        block = parse_verify(verify)
    except InvalidPlan as exc:
        return Detection(False, False, f"verify block unreadable: {exc.message}")
    origin = datetime(2026, 1, 1)
    since = origin + timedelta(seconds=FIX_AT_S)
    polls = int(block.wait_s(max_wait_s=MAX_WAIT_S) // POLL_S) + 1
    after = _first_held(block, SeriesSource(scenario, series, "after", origin), since, polls)
    before = _first_held(block, SeriesSource(scenario, series, "before", origin), since, polls)
    reason = (f"after the fix: {after[1]}; without it: {before[1]}")
    return Detection(after[0], before[0], reason)


def _first_held(block: VerifyBlock, source: SeriesSource, since: datetime,
                polls: int) -> tuple[bool, str]:
    """Whether the block holds at some reading, and the reading that decided."""
    last = "no reading"
    for n in range(polls):
        moment = Moment(at=since + timedelta(seconds=n * POLL_S), since=since)
        outcome = read_block(block, source, UrlAllowList([]), moment, timeout_s=1.0)
        last = outcome.reason
        if outcome.passed:
            return True, f"held at +{n * POLL_S}s ({last})"
        if outcome.state == "cannot":
            break
    return False, f"never held ({last})"
