"""The analyst's statistics, pure and explainable: one metric's series around the incident start
→ at most one finding.

A series is ``[(offset_s, value), …]`` with offsets relative to the incident start: negative is
the baseline window, zero and after is the incident window. Three tests, each a sentence a
person can check against the graph:

- **shift** (level metrics): the incident window's mean against the baseline's mean, as a
  z-score over the baseline's spread, with the change point (the split that best explains the
  series as two flat segments) saying when it moved;
- **error ratio** (ratio metrics): the incident window's error ratio over the baseline's, with an
  absolute floor so 0.01 % → 0.03 % is not an incident;
- **trend** (level metrics): a steady climb across both windows (a leak), by a straight-line fit
  that explains the series well and rises by a meaningful share of its level.

A flat, noisy series gives no finding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["level", "ratio"]
Point = tuple[float, float]


@dataclass(frozen=True)
class Thresholds:
    """When a statistic is worth a finding."""

    shift_z: float = 4.0  # incident mean this many baseline deviations away
    shift_change: float = 0.2  # … and at least 20 % away from the baseline mean
    ratio: float = 3.0  # error ratio at least 3 times the baseline's
    ratio_floor: float = 0.01  # … and at least 1 % of requests
    trend_r2: float = 0.8  # a straight line explains the series this well
    trend_rise: float = 0.15  # … and climbs by 15 % of its starting level over the series
    step_gain: float = 0.5  # a step explains at least half the variance a line leaves
    latest_points: int = 5  # the "latest window" of the z-score
    min_points: int = 6  # on each side of the incident start


@dataclass(frozen=True)
class Finding:
    """One metric's anomaly, with the numbers behind it."""

    metric: str
    statistic: Literal["shift", "error_ratio", "trend"]
    baseline: float
    current: float
    change: float  # relative: (current - baseline) / |baseline|
    confidence: float  # 0..1
    z_latest: float  # the latest window's z-score against the baseline
    changed_at_s: float | None  # offset of the change point from the incident start
    summary: str

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "statistic": self.statistic,
                "baseline": _round(self.baseline), "current": _round(self.current),
                "change": _round(self.change), "confidence": round(self.confidence, 2),
                "z_latest": _round(self.z_latest), "changed_at_s": self.changed_at_s,
                "summary": self.summary}


DEFAULT_THRESHOLDS = Thresholds()


def analyse(metric: str, series: Sequence[Point], kind: Kind,
            limits: Thresholds = DEFAULT_THRESHOLDS) -> Finding | None:
    """The finding ``series`` shows for ``metric`` (a ``kind`` metric), or None."""
    points = sorted((t, v) for t, v in series if math.isfinite(v))
    before = [v for t, v in points if t < 0]
    after = [v for t, v in points if t >= 0]
    if len(before) < limits.min_points or len(after) < limits.min_points:
        return None
    if kind == "ratio":
        return _error_ratio(metric, points, before, after, limits)
    return _shift(metric, points, before, after, limits) or _trend(metric, points, limits)


def _error_ratio(metric: str, points: Sequence[Point], before: list[float],
                 after: list[float], limits: Thresholds) -> Finding | None:
    base, now = _mean(before), _mean(after)
    ratio = now / max(base, limits.ratio_floor / 10)
    if ratio < limits.ratio or now < limits.ratio_floor:
        return None
    z_latest = _z(_mean(after[-limits.latest_points:]), before)
    confidence = _confidence(min(abs(_z(now, before)), 3 * ratio))
    when = change_point(points)
    summary = (f"{metric} error ratio {_pct(now)} vs {_pct(base)} before "
               f"({ratio:.1f}x){_since(when)}")
    return Finding(metric, "error_ratio", base, now, _relative(base, now), confidence, z_latest,
                   when, summary)


def _shift(metric: str, points: Sequence[Point], before: list[float], after: list[float],
           limits: Thresholds) -> Finding | None:
    base, now = _mean(before), _mean(after)
    z = _z(now, before)
    change = _relative(base, now)
    if abs(z) < limits.shift_z or abs(change) < limits.shift_change:
        return None
    if not _step_explains_better(points, limits):
        return None  # a steady climb, not a step: the trend test says it better
    when = change_point(points)
    direction = "up" if change > 0 else "down"
    summary = (f"{metric} stepped {direction} {abs(change):.0%}: {now:.4g} vs {base:.4g} "
               f"before (z {z:.1f}){_since(when)}")
    return Finding(metric, "shift", base, now, change, _confidence(abs(z)),
                   _z(_mean(after[-limits.latest_points:]), before), when, summary)


def _trend(metric: str, points: Sequence[Point], limits: Thresholds) -> Finding | None:
    slope, intercept, r2 = linear_fit(points)
    start, end = points[0][0], points[-1][0]
    first, last = intercept + slope * start, intercept + slope * end
    rise = _relative(first, last)
    if r2 < limits.trend_r2 or abs(rise) < limits.trend_rise:
        return None
    per_hour = slope * 3600
    before = [v for t, v in points if t < 0]
    summary = (f"{metric} {'rising' if slope > 0 else 'falling'} steadily: {per_hour:+.4g}/h, "
               f"{first:.4g} → {last:.4g} ({rise:+.0%}, fit R² {r2:.2f})")
    return Finding(metric, "trend", first, last, rise, r2,
                   _z(_mean([v for _, v in points[-limits.latest_points:]]), before),
                   None, summary)


def change_point(points: Sequence[Point]) -> float | None:
    """The offset where the series is best cut into two flat segments (least squared error)."""
    values = [v for _, v in points]
    if len(values) < 4:
        return None
    best, best_at = math.inf, None
    for cut in range(2, len(values) - 1):
        cost = _sse(values[:cut]) + _sse(values[cut:])
        if cost < best:
            best, best_at = cost, points[cut][0]
    return best_at


def linear_fit(points: Sequence[Point]) -> tuple[float, float, float]:
    """Least-squares line through ``points``: slope, intercept, R²."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t == 0:
        return 0.0, mean_v, 0.0
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t
    intercept = mean_v - slope * mean_t
    total = sum((v - mean_v) ** 2 for _, v in points)
    left = sum((v - intercept - slope * t) ** 2 for t, v in points)
    return slope, intercept, 0.0 if total == 0 else 1 - left / total


def _step_explains_better(points: Sequence[Point], limits: Thresholds) -> bool:
    """A step (two flat segments) leaves much less error than a straight line."""
    values = [v for _, v in points]
    slope, intercept, _ = linear_fit(points)
    line = sum((v - intercept - slope * t) ** 2 for t, v in points)
    cut = change_point(points)
    if cut is None or line == 0:
        return True
    index = next(i for i, (t, _) in enumerate(points) if t == cut)
    step = _sse(values[:index]) + _sse(values[index:])
    return step <= (1 - limits.step_gain) * line


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _sse(values: Sequence[float]) -> float:
    mean = _mean(values)
    return sum((v - mean) ** 2 for v in values)


def _z(value: float, baseline: Sequence[float]) -> float:
    mean = _mean(baseline)
    spread = math.sqrt(_sse(baseline) / max(len(baseline) - 1, 1))
    # A perfectly flat baseline has no spread: a hundredth of its level stands in for it.
    return (value - mean) / max(spread, abs(mean) * 0.01, 1e-12)


def _relative(base: float, now: float) -> float:
    return (now - base) / max(abs(base), 1e-12)


def _confidence(z: float) -> float:
    """z 4 → 0.74, z 8 → 0.93: grows with the evidence, never reaches certainty."""
    return min(0.99, 1 - math.exp(-abs(z) / 3))


def _since(offset: float | None) -> str:
    if offset is None:
        return ""
    minutes = offset / 60
    return f", since {abs(minutes):.0f} min {'before' if minutes < 0 else 'after'} the start"


def _pct(value: float) -> str:
    return f"{value:.2%}"


def _round(value: float) -> float:
    return float(f"{value:.6g}")
