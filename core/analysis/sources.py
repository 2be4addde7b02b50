"""Where the analyst reads a metric's series around the incident start: Prometheus'
``query_range`` (production) or recorded series files (the embedded default and tests).
A Prometheus query is checked (``core/domain/promql.py``) for the case it reads for before it is
sent, and carries Prometheus' own ``timeout``.

Both answer ``read(spec, incident_at)`` with points ``[(offset_s, value), …]`` relative to the
incident start, and ``link(spec, incident_at)``: where a person sees the same numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import httpx

from core.analysis.catalog import MetricSpec
from core.domain.promql import QueryBounds, check_query, seconds_param
from core.evidence.configured import promql_bounds
from core.evidence.prometheus import CLIENT_GRACE_S, prometheus_answer, prometheus_get
from core.evidence.sources import EvidenceMissing, QueryRefused
from core.redact import url_without_credentials
from core.settings import Settings

Series = list[tuple[float, float]]
RECORDED_DEMO = Path(__file__).parent / "recorded"
"""Recorded series for a demo (``OPSGATE_SERIES_DIR``): a latency step, an error-ratio spike and
a memory leak, so each kind of case title shows its finding."""


class SeriesSource(Protocol):
    def read(self, spec: MetricSpec, incident_at: datetime) -> Series:
        """The metric's points around ``incident_at``; ``EvidenceMissing`` when there are none."""
        ...

    def link(self, spec: MetricSpec, incident_at: datetime) -> str:
        """Where a person can look at the same query and window."""
        ...


class PrometheusRangeSource:
    """``GET /api/v1/query_range`` over [start - before, min(now, start + after)], for the case
    whose scope value (its tenant) is ``scope`` (``scoped``)."""

    def __init__(self, base_url: str, *, before_s: int, after_s: int, step_s: int,
                 timeout_s: float | None = None, bounds: QueryBounds | None = None,
                 scope: str | None = None,
                 now: Callable[[], datetime] | None = None) -> None:
        self._base = base_url.rstrip("/")
        self._endpoint = httpx.URL(self._base + "/api/v1/query_range")
        self._shown_base = url_without_credentials(self._base)  # links reach people
        self.before_s, self.after_s, self.step_s = before_s, after_s, step_s
        bounds = bounds or QueryBounds()
        self.bounds = bounds if timeout_s is None else replace(bounds, timeout_s=timeout_s)
        self.scope = scope
        self._now = now or (lambda: datetime.now(UTC))

    def scoped(self, scope: str | None) -> PrometheusRangeSource:
        """The same Prometheus and windows, reading for the case whose scope value is
        ``scope``."""
        return PrometheusRangeSource(self._base, before_s=self.before_s, after_s=self.after_s,
                                     step_s=self.step_s, bounds=self.bounds, scope=scope,
                                     now=self._now)

    def read(self, spec: MetricSpec, incident_at: datetime) -> Series:
        verdict = check_query(spec.query, self.bounds, self.scope)
        if not verdict.allowed:
            raise QueryRefused(f"the query is {verdict.reason}")
        start, end = self._window(incident_at)
        url = self._endpoint.copy_merge_params({
            "query": spec.query, "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}", "step": str(self.step_s),
            "timeout": seconds_param(self.bounds.timeout_s)})
        reply = prometheus_get(self._endpoint, url, self.bounds.timeout_s + CLIENT_GRACE_S)
        return matrix_points(reply.body, incident_at.timestamp(), status=reply.status)

    def link(self, spec: MetricSpec, incident_at: datetime) -> str:
        start, end = self._window(incident_at)
        params = {"g0.expr": spec.query, "g0.tab": "0",
                  "g0.range_input": f"{int((end - start).total_seconds())}s",
                  "g0.end_input": end.strftime("%Y-%m-%d %H:%M:%S")}
        return str(httpx.URL(self._shown_base + "/graph").copy_merge_params(params))

    def _window(self, incident_at: datetime) -> tuple[datetime, datetime]:
        start = incident_at - timedelta(seconds=self.before_s)
        end = min(self._now(), incident_at + timedelta(seconds=self.after_s))
        return start, max(end, start + timedelta(seconds=self.step_s))


def matrix_points(body: bytes, origin_s: float, status: int = 200) -> Series:
    """The points of a ``query_range`` answer, offsets from ``origin_s``. Several series (one per
    label set) are summed per timestamp, the way a dashboard's total reads."""
    doc = prometheus_answer(body, status)
    try:
        data = doc["data"]
        if data["resultType"] != "matrix":
            raise ValueError(f"a {data['resultType']} result; query_range gives a matrix")
        totals: dict[float, float] = {}
        for series in data["result"]:
            for stamp, value in series["values"]:
                totals[float(stamp)] = totals.get(float(stamp), 0.0) + float(value)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise EvidenceMissing(f"Prometheus answer not understood: {exc!r}") from exc
    points = [(t - origin_s, v) for t, v in sorted(totals.items()) if math.isfinite(v)]
    if not points:
        raise EvidenceMissing("no data: the query matched no series")
    return points


class RecordedSource:
    """``<folder>/<metric>.json`` = ``{"metric", "step_s", "points": [[offset_s, value], …]}``,
    offsets already relative to the incident start (whatever the case's own start is)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def read(self, spec: MetricSpec, incident_at: datetime) -> Series:
        path = self._path(spec)
        try:
            doc = json.loads(path.read_text())
            points = [(float(t), float(v)) for t, v in doc["points"]]
        except FileNotFoundError as exc:
            raise EvidenceMissing(f"no recorded series {path.name}") from exc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EvidenceMissing(f"recorded series {path.name} unreadable: {exc!r}") from exc
        if not points:
            raise EvidenceMissing(f"recorded series {path.name} is empty")
        return points

    def link(self, spec: MetricSpec, incident_at: datetime) -> str:
        return self._path(spec).resolve().as_uri()

    def _path(self, spec: MetricSpec) -> Path:
        return self.folder / f"{spec.name}.json"


def for_case(source: SeriesSource, scope: str | None) -> SeriesSource:
    """``source`` as it reads for a case whose scope value (its tenant) is ``scope``: Prometheus
    checks each query against it; recorded files send no query."""
    return source.scoped(scope) if isinstance(source, PrometheusRangeSource) else source


def series_source(settings: Settings) -> SeriesSource | None:
    """Prometheus when ``OPSGATE_PROMETHEUS_URL`` is set, else the recorded series of
    ``OPSGATE_SERIES_DIR``; None when neither is: the analyst then reads no metrics."""
    if settings.prometheus_url:
        return PrometheusRangeSource(settings.prometheus_url, before_s=settings.analysis_before_s,
                                     after_s=settings.analysis_after_s,
                                     step_s=settings.analysis_step_s,
                                     bounds=promql_bounds(settings))
    if settings.series_dir:
        return RecordedSource(settings.series_dir)
    return None
