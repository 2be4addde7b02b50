"""The Prometheus metrics source: instant queries on its HTTP API, each checked against the
PromQL bounds before it is sent, and the reading of Prometheus' answers (shared with the
analyst's range queries, ``core/analysis/sources.py``)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import datetime
from typing import Any

import httpx

from core.domain.promql import (
    Labels,
    QueryBounds,
    check_component_query,
    check_query,
    metric_names,
    quoted,
    seconds_param,
)
from core.evidence.sources import EvidenceMissing, QueryRefused, QueryTimedOut, Worst
from core.outbound.allowlists import Origin
from core.outbound.http import HttpReply, RedirectRefused, send

PROMETHEUS_BODY_LIMIT = 1_048_576
CLIENT_GRACE_S = 1.0
"""How much longer than Prometheus' own ``timeout`` the HTTP client waits: the server's answer
that it timed out still arrives."""


class PrometheusSource:
    """Instant queries against Prometheus' HTTP API (``GET /api/v1/query``), evaluated at the
    reading's time (``time=``) when one is given. A query is checked against ``bounds`` for the
    case whose scope value (its tenant) is ``scope`` before it is sent (``QueryRefused``), and
    asks Prometheus to give up after ``bounds.timeout_s`` (``QueryTimedOut``).

    Reading for a case's components (``components``: each one's metric labels, the verifier's
    case), a query must select the series of one of them (``check_component_query``), and a value
    counts only when that component has series of the metrics the query names at the reading
    (``series_read``): ``count(x{service="payments-api"}) or vector(0)`` over a service that
    sends no ``x`` is no data, not zero.

    The window of a check with ``for_s`` is opsgate's own subquery around the checked query,
    ``max_over_time((q)[for_s:])``, evaluated at the server's evaluation interval: its range is
    the plan's ``for_s`` (at most a day, ``core/domain/verify.py``), bounded by the timeout."""

    def __init__(self, base_url: str, timeout_s: float | None = None, *,
                 bounds: QueryBounds | None = None, scope: str | None = None,
                 components: tuple[Labels, ...] | None = None) -> None:
        self._base = base_url
        self._endpoint = httpx.URL(base_url.rstrip("/") + "/api/v1/query")
        bounds = bounds or QueryBounds()
        self.bounds = bounds if timeout_s is None else replace(bounds, timeout_s=timeout_s)
        self.scope = scope
        self.components = components  # None: not read for a case's components (no such rule)

    def scoped(self, scope: str | None,
               components: tuple[Labels, ...] | None = None) -> PrometheusSource:
        """The same Prometheus, reading for the case whose scope value is ``scope`` and, when
        given, whose components' metric labels are ``components``."""
        return PrometheusSource(self._base, bounds=self.bounds, scope=scope,
                                components=components)

    def read(self, query: str, *, over_s: float | None = None, worst: Worst = "max",
             at: datetime | None = None) -> float:
        labels = self._allowed(query)
        expr = query if over_s is None else f"{worst}_over_time(({query})[{duration(over_s)}:])"
        reply = self._get(expr, at)
        value = prometheus_value(reply.body, worst, status=reply.status)
        if labels:
            self._series_read(query, labels, at)
        return value

    def _allowed(self, query: str) -> Labels:
        """The labels of the component ``query`` reads (none without ``components``), or
        ``QueryRefused``: it is never sent."""
        labels: Labels = ()
        if self.components is None:
            verdict = check_query(query, self.bounds, self.scope)
        else:
            verdict, labels = check_component_query(query, self.bounds, self.scope,
                                                     self.components)
        if not verdict.allowed:
            raise QueryRefused(f"the query is {verdict.reason}")
        return labels

    def _series_read(self, query: str, labels: Labels, at: datetime | None) -> None:
        """``EvidenceMissing`` unless the component has series of a metric ``query`` names at
        ``at``: a value computed from no series of it (``… or vector(0)``) measures nothing."""
        wanted = dict(labels)
        if self.bounds.scope_label is not None and self.scope:
            wanted[self.bounds.scope_label] = self.scope
        matchers = ", ".join(f"{key}={quoted(value)}" for key, value in sorted(wanted.items()))
        presence = " or ".join(f"count({{__name__={quoted(name)}, {matchers}}})"
                               for name in metric_names(query))
        try:
            reply = self._get(presence, at)
            prometheus_value(reply.body, "max", status=reply.status)
        except EvidenceMissing as exc:
            if isinstance(exc, QueryTimedOut):
                raise
            shown = ", ".join(f"{key}={quoted(value)}" for key, value in labels)
            raise EvidenceMissing(f"no data: the query read no series of the component "
                                  f"({shown})") from exc

    def _get(self, expr: str, at: datetime | None) -> HttpReply:
        params: dict[str, str] = {"query": expr, "timeout": seconds_param(self.bounds.timeout_s)}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        return prometheus_get(self._endpoint, self._endpoint.copy_merge_params(params),
                              self.bounds.timeout_s + CLIENT_GRACE_S)


def duration(seconds: float) -> str:
    """A Prometheus duration: whole seconds (``300s``), else milliseconds (``600ms``)."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{max(1, round(seconds * 1000))}ms"


def prometheus_get(endpoint: httpx.URL, url: httpx.URL, timeout_s: float) -> HttpReply:
    """``GET url`` from Prometheus, following redirects only on ``endpoint``'s origin; an
    unreachable server or an oversized answer is ``EvidenceMissing``."""
    origin = Origin.of(endpoint)
    try:
        reply = send("GET", url, allowed=lambda u: Origin.of(u) == origin,
                     timeout_s=timeout_s, body_limit=PROMETHEUS_BODY_LIMIT)
    except httpx.TimeoutException as exc:
        raise QueryTimedOut(f"Prometheus did not answer within {timeout_s:g}s "
                            f"({type(exc).__name__})") from exc
    except (httpx.HTTPError, RedirectRefused) as exc:
        raise EvidenceMissing(f"Prometheus unreachable: {type(exc).__name__}: {exc}") from exc
    if reply.truncated:
        raise EvidenceMissing(f"Prometheus answer over {PROMETHEUS_BODY_LIMIT} bytes")
    return reply


def prometheus_answer(body: bytes, status: int = 200) -> dict[str, Any]:
    """Prometheus' answer document when it says ``success``; otherwise ``EvidenceMissing``
    saying why (no JSON, or the server's own error text): ``QueryTimedOut`` when the server
    says the query timed out (``errorType`` ``timeout``, HTTP 503 or 422)."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise EvidenceMissing(f"Prometheus answered HTTP {status} without JSON") from exc
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error", "no error text") if isinstance(doc, dict) else "not an object"
        if isinstance(doc, dict) and doc.get("errorType") == "timeout":
            raise QueryTimedOut(f"Prometheus timed out on the query (HTTP {status}): {error}")
        raise EvidenceMissing(f"Prometheus refused the query (HTTP {status}): {error}")
    return doc


def prometheus_value(body: bytes, worst: Worst, status: int = 200) -> float:
    """The worst value of an instant query's answer (vector or scalar)."""
    doc = prometheus_answer(body, status)
    try:
        values = _sample_values(doc["data"])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise EvidenceMissing(f"Prometheus answer not understood: {exc!r}") from exc
    if not values:
        raise EvidenceMissing("no data: the query matched no series")
    if any(math.isnan(v) for v in values):
        raise EvidenceMissing("the query returned NaN")
    return max(values) if worst == "max" else min(values)


def _sample_values(data: dict[str, Any]) -> list[float]:
    kind, result = data["resultType"], data["result"]
    if kind == "scalar":
        return [float(result[1])]
    if kind == "vector":
        return [float(sample["value"][1]) for sample in result]
    raise ValueError(f"a {kind} result; an instant query must give a vector or a scalar")
