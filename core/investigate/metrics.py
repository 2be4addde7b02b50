"""The investigator's metric reads (``query_metrics``, ``list_metrics``): PromQL against Prometheus'
HTTP API for one component, within its metric labels and the case's window, answered as a summary
per series (first, last, min, max, the largest change point and when), never raw points.

Refusals raise ``OutOfScope`` before anything is sent; Prometheus' own errors (a bad query, a
timeout, an answer too large) are the answer's ``error`` sentence; an unreachable Prometheus is
``MetricsUnavailable``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from core.alerts.text import shortened, storable
from core.analysis.stats import change_point
from core.domain.promql import LABEL_NAME, QueryBounds, check_query, quoted, seconds_param
from core.errors import Unavailable
from core.evidence.prometheus import (
    CLIENT_GRACE_S,
    PROMETHEUS_BODY_LIMIT,
    prometheus_answer,
    prometheus_get,
)
from core.evidence.sources import EvidenceMissing, QueryTimedOut
from core.investigate.scope import Labels, OutOfScope, Target
from core.outbound.http import RedirectRefused

LOOK_BACK = timedelta(hours=6)
"""How far before the case's start a read may look."""
MIN_STEP_S = 15
MAX_POINTS = 11_000
"""Prometheus refuses a range query of more points per series."""
DEFAULT_POINTS = 240
"""A range query without a step is read at about this many points."""
MAX_SERIES = 20
MAX_NAMES = 200
MAX_LABELS = 10
MAX_VALUES = 20
MAX_LABEL_VALUE_CHARS = 200
CHANGE_POINT_POINTS = 240
"""``change_point`` is quadratic: longer series are located on this many averaged buckets, then
refined on the raw points around the bucket found."""
USEFUL_LABELS = ("job", "instance", "pod", "container", "namespace", "code", "status", "method",
                 "route", "handler", "path", "endpoint", "version")
"""Label names listed first by ``list_metrics``: the ones an investigation narrows by."""

Point = tuple[float, float]


class MetricsUnavailable(Unavailable):
    """Prometheus did not answer (unreachable, refused the connection): read again later."""

    code = "metrics_unavailable"


class _Failed(Exception):
    """Prometheus answered, but not with data: the sentence goes into the answer."""


class MetricsReader:
    """Prometheus at ``base_url``, read for one component at a time within ``bounds`` (and the
    case's tenant ``scope`` when ``bounds.scope_label`` is set)."""

    def __init__(self, base_url: str, bounds: QueryBounds, *, scope: str | None = None) -> None:
        self._base = base_url.rstrip("/")
        self._endpoint = httpx.URL(self._base + "/api/v1/query")
        self.bounds = bounds
        self.scope = scope

    def scoped(self, scope: str | None) -> MetricsReader:
        """The same Prometheus, reading for the case whose tenant is ``scope``."""
        return MetricsReader(self._base, self.bounds, scope=scope)

    def query(self, target: Target, promql: str, *, case_started_at: datetime, now: datetime,
              start: datetime | None = None, end: datetime | None = None,
              step_s: float | None = None) -> dict[str, Any]:
        """``promql`` at ``end`` (default ``now``) when ``start`` is None, else over
        [start, end] every ``step_s``; ``OutOfScope`` when the query or its window is refused.
        Naive datetimes are read as UTC."""
        verdict = check_query(promql, self.bounds, self.scope, _metric_labels(target))
        if not verdict.allowed:
            raise OutOfScope(f"the query is {verdict.reason}")
        earliest, now = _utc(case_started_at) - LOOK_BACK, _utc(now)
        if start is None:
            shape, path, params = _instant(_utc(end or now), earliest, now)
        else:
            shape, path, params = _ranged(_utc(start), _utc(end or now), step_s, earliest, now,
                                          max(MIN_STEP_S, self.bounds.min_step_s))
        head = {"component": target.name, "query": promql, **shape}
        params |= {"query": promql, "timeout": seconds_param(self.bounds.timeout_s)}
        try:
            return head | _summaries(self._data(path, params))
        except _Failed as failed:
            return head | {"error": str(failed), "series": [], "series_total": 0, "notes": []}

    def list_metrics(self, target: Target, *, case_started_at: datetime, now: datetime,
                     match: str | None = None) -> dict[str, Any]:
        """The metric names the component's series carry over [case start - 6 h, now] (those
        containing ``match``, any case, when given) and the values of its most useful labels."""
        labels = _metric_labels(target)
        selector = "{" + ", ".join(f"{k}={quoted(v)}" for k, v in self._selector(labels)) + "}"
        start, end = _utc(case_started_at) - LOOK_BACK, _utc(now)
        window = {"match[]": selector, "start": _stamp(start), "end": _stamp(end)}
        head: dict[str, Any] = {"component": target.name, "selector": selector,
                                "start": iso(start), "end": iso(end), "match": match}
        try:
            names = self._strings("/api/v1/label/__name__/values", window)
            label_names = self._strings("/api/v1/labels", window)
            chosen = _chosen_labels(label_names, {k for k, _ in self._selector(labels)})
            values = {name: self._strings(f"/api/v1/label/{name}/values", window)
                      for name in chosen[:MAX_LABELS]}
        except _Failed as failed:
            return head | {"error": str(failed), "metrics": [], "metrics_total": 0,
                           "labels": [], "labels_total": 0, "notes": []}
        return head | _listing(names, match, chosen, values)

    def _selector(self, labels: Labels) -> Labels:
        """The component's labels, and the case's tenant when queries are scoped by one."""
        label = self.bounds.scope_label
        if label is None:
            return labels
        if not self.scope:
            raise OutOfScope(f"the case has no {label} to scope the read to")
        return tuple(sorted({*labels, (label, self.scope)}))

    def _strings(self, path: str, params: Mapping[str, str]) -> list[str]:
        data = self._data(path, params)
        if not isinstance(data, list):
            raise _Failed("Prometheus' answer is not a list of names")
        return sorted(storable(str(item)) for item in data)

    def _data(self, path: str, params: Mapping[str, str]) -> Any:
        """The ``data`` of Prometheus' answer to ``GET path``; ``_Failed`` with its sentence,
        ``MetricsUnavailable`` when it cannot be reached."""
        url = httpx.URL(self._base + path).copy_merge_params(dict(params))
        try:
            reply = prometheus_get(self._endpoint, url, self.bounds.timeout_s + CLIENT_GRACE_S)
            return prometheus_answer(reply.body, reply.status).get("data")
        except QueryTimedOut as exc:
            if isinstance(exc.__cause__, httpx.ConnectTimeout):
                raise _unreachable(exc.__cause__) from exc
            raise _Failed(f"{exc.reason}: narrow the query or shorten its window") from exc
        except EvidenceMissing as exc:
            if isinstance(exc.__cause__, httpx.HTTPError | RedirectRefused):
                raise _unreachable(exc.__cause__) from exc
            raise _Failed(_sentence(exc.reason)) from exc


def _unreachable(cause: BaseException) -> MetricsUnavailable:
    return MetricsUnavailable(f"Prometheus is unreachable ({type(cause).__name__}); read the "
                              "metrics again later")


def _metric_labels(target: Target) -> Labels:
    """The labels every read of ``target`` must carry; fail closed when it names none."""
    if not target.metric_labels:
        raise OutOfScope(f"{target.name} names no metric labels (annotation "
                         "opsgate.dev/metric-labels); no metric can be read for it")
    return target.metric_labels


def _sentence(reason: str) -> str:
    if reason == f"Prometheus answer over {PROMETHEUS_BODY_LIMIT} bytes":  # prometheus_get's
        return f"{reason}: narrow the query (fewer series, a coarser step, a shorter window)"
    return reason


# -- the window ----------------------------------------------------------------------------------


def _within(moment: datetime, what: str, earliest: datetime, now: datetime) -> datetime:
    if moment < earliest:
        raise OutOfScope(f"{what} {iso(moment)} is before {iso(earliest)}, 6 h before the case "
                         "started: read from then on")
    if moment > now:
        raise OutOfScope(f"{what} {iso(moment)} is after now ({iso(now)})")
    return moment


Read = tuple[dict[str, Any], str, dict[str, str]]
"""What a query's answer says of its moments, the API path, and the moments' parameters."""


def _instant(at: datetime, earliest: datetime, now: datetime) -> Read:
    at = _within(at, "the query's time", earliest, now)
    return {"kind": "instant", "at": iso(at)}, "/api/v1/query", {"time": _stamp(at)}


def _ranged(start: datetime, end: datetime, step_s: float | None, earliest: datetime,
            now: datetime, min_step_s: float) -> Read:
    first, last, step = _range(start, end, step_s, earliest, now, min_step_s)
    return ({"kind": "range", "start": iso(first), "end": iso(last), "step_s": step},
            "/api/v1/query_range",
            {"start": _stamp(first), "end": _stamp(last), "step": seconds_param(step)})


def _range(start: datetime, end: datetime, step_s: float | None, earliest: datetime,
           now: datetime, min_step_s: float) -> tuple[datetime, datetime, float]:
    """The range's start, end and step, each within its bounds, or ``OutOfScope`` saying why."""
    _within(start, "the window's start", earliest, now)
    _within(end, "the window's end", earliest, now)
    span = (end - start).total_seconds()
    if span <= 0:
        raise OutOfScope(f"the window's start {iso(start)} is not before its end {iso(end)}")
    if step_s is None:
        step_s = max(min_step_s, MIN_STEP_S * math.ceil(span / DEFAULT_POINTS / MIN_STEP_S))
    if not math.isfinite(step_s):
        raise OutOfScope(f"the step is not a number of seconds: use step_s of at least "
                         f"{min_step_s:g}")
    if step_s < min_step_s:
        raise OutOfScope(f"the step {step_s:g}s is finer than {min_step_s:g}s: use step_s of at "
                         f"least {min_step_s:g}")
    points = math.floor(span / step_s) + 1
    if points > MAX_POINTS:
        raise OutOfScope(f"a step of {step_s:g}s over {span / 3600:.1f} h gives {points} points "
                         f"per series; Prometheus answers at most {MAX_POINTS}: use step_s of at "
                         f"least {math.ceil(span / (MAX_POINTS - 1))}")
    return start, end, step_s


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _stamp(moment: datetime) -> str:
    return f"{moment.timestamp():.3f}"


def iso(moment: datetime | float) -> str:
    """A moment as the answers write it: ISO 8601 in UTC, to the second (``…T14:02:00Z``);
    a naive datetime is read as UTC."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the answer ----------------------------------------------------------------------------------


def _summaries(data: Any) -> dict[str, Any]:
    """``series`` (at most ``MAX_SERIES`` summaries), ``series_total``, ``result_type`` and
    ``notes`` (what was cut) of a query's ``data``."""
    every: list[tuple[Mapping[str, Any], list[Point]]]
    try:
        kind, result = str(data["resultType"]), data["result"]
        if kind == "scalar":
            every = [({}, [_point(result)])]
        elif kind in ("vector", "matrix"):
            every = [(dict(series["metric"]), _points(series, kind)) for series in result]
        else:
            raise ValueError(f"a {kind} result")
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise _Failed(f"Prometheus' answer was not understood ({exc})") from exc
    notes = []
    if len(every) > MAX_SERIES:
        notes.append(f"{len(every) - MAX_SERIES} more series cut (at most {MAX_SERIES} are "
                     "shown): aggregate (sum by (…)) or add matchers to see the rest")
    return {"result_type": kind, "series_total": len(every), "notes": notes,
            "series": [summary(labels, points) for labels, points in every[:MAX_SERIES]]}


def _points(series: Mapping[str, Any], kind: str) -> list[Point]:
    return [_point(series["value"])] if kind == "vector" else [_point(v) for v in series["values"]]


def _point(pair: Sequence[Any]) -> Point:
    return float(pair[0]), float(pair[1])


def summary(labels: Mapping[str, Any], points: Sequence[Point]) -> dict[str, Any]:
    """One series as the model reads it: its labels, how many points, first, last, min, max and
    its largest change (when, and the means before and after), NaN and ±Inf left out."""
    finite = [(t, v) for t, v in points if math.isfinite(v)]
    values = [v for _, v in finite]
    answer: dict[str, Any] = {
        "labels": {shortened(str(k), 100): shortened(str(v), MAX_LABEL_VALUE_CHARS)
                   for k, v in labels.items()},
        "points": len(finite),
        "first": _round(values[0]) if values else None,
        "last": _round(values[-1]) if values else None,
        "min": _round(min(values)) if values else None,
        "max": _round(max(values)) if values else None,
        "change": largest_change(finite),
    }
    if len(finite) < len(points):
        answer["not_finite"] = len(points) - len(finite)
    return answer


def largest_change(points: Sequence[Point]) -> dict[str, Any] | None:
    """Where ``points`` are best cut into two flat segments (``core.analysis.stats``), with the
    means before and after; None for fewer than 4 points or a flat series."""
    at = _change_at(points)
    if at is None:
        return None
    before = [v for t, v in points if t < at]
    after = [v for t, v in points if t >= at]
    mean_before, mean_after = sum(before) / len(before), sum(after) / len(after)
    if mean_before == mean_after:
        return None
    return {"at": iso(at), "before": _round(mean_before), "after": _round(mean_after)}


def _change_at(points: Sequence[Point]) -> float | None:
    if len(points) <= CHANGE_POINT_POINTS:
        return change_point(points)
    size = math.ceil(len(points) / CHANGE_POINT_POINTS)
    buckets = [points[i:i + size] for i in range(0, len(points), size)]
    coarse = change_point([(b[0][0], sum(v for _, v in b) / len(b)) for b in buckets])
    if coarse is None:
        return None
    index = next(i for i, (t, _) in enumerate(points) if t == coarse)
    refined = change_point(points[max(0, index - 2 * size):index + 2 * size])
    return coarse if refined is None else refined


def _listing(names: list[str], match: str | None, chosen: list[str],
             values: Mapping[str, list[str]]) -> dict[str, Any]:
    if match:
        names = [name for name in names if match.casefold() in name.casefold()]
    notes = []
    if len(names) > MAX_NAMES:
        notes.append(f"{len(names) - MAX_NAMES} more metric names cut (at most {MAX_NAMES} are "
                     "shown): pass match to narrow them")
    if len(chosen) > MAX_LABELS:
        notes.append(f"{len(chosen) - MAX_LABELS} more labels not listed: "
                     f"{', '.join(chosen[MAX_LABELS:MAX_LABELS + 20])}")
    if any(len(found) > MAX_VALUES for found in values.values()):
        notes.append(f"at most {MAX_VALUES} values are shown per label")
    labels = [{"name": name, "values": [shortened(v, MAX_LABEL_VALUE_CHARS) for v in
                                        found[:MAX_VALUES]], "values_total": len(found)}
              for name, found in values.items()]
    return {"metrics": names[:MAX_NAMES], "metrics_total": len(names), "labels": labels,
            "labels_total": len(chosen), "notes": notes}


def _chosen_labels(names: Sequence[str], fixed: set[str]) -> list[str]:
    """The label names worth listing: the useful ones first, then the rest in order; never
    ``__name__`` nor the component's own labels (their values are known)."""
    rest = [n for n in names if n != "__name__" and n not in fixed and LABEL_NAME.fullmatch(n)]
    return [n for n in USEFUL_LABELS if n in rest] + [n for n in rest if n not in USEFUL_LABELS]


def _round(value: float) -> float:
    return float(f"{value:.6g}")

