"""What the verifier reads to judge a plan's ``verify`` block, and one reading's judgement.

The accepted shapes are ``core/domain/verify.py``'s (anything else is a "cannot verify: …"
reading, never an exception). One reading at time ``at`` of a change that finished at ``since``:
a metric check with ``for_s`` is judged only once its window after the change has passed, on the
worst value over the window ending at ``at`` (Prometheus: ``max_over_time((q)[Ns:])`` evaluated
at ``at``); before that it is *pending*, with its value at ``at`` as the reading. A check without
``for_s``, and a probe, is judged on its reading at ``at``. A block holds when every check holds;
the first check that does not is the reason.

Sources: ``PrometheusSource`` (the HTTP query API: a query is checked by
``core/domain/promql.py`` before it is sent, and carries Prometheus' own ``timeout``) and
``StaticSource``, a stand-in table used only where one is configured (``OPSGATE_STATIC_METRICS``;
``opsgate demo`` sets its own, which reacts to the approved change). Its readings are labelled
(``STAND_IN``). Neither configured: no source, and the ``plan_ready`` guard refuses a metric
check (``NO_METRICS_SOURCE``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

import httpx

from core.domain.promql import QueryBounds, check_query, seconds_param
from core.domain.verify import (
    NO_METRICS_SOURCE,
    MetricCheck,
    ProbeCheck,
    ProbeTarget,
    VerifyBlock,
    parse_verify,
    problem_lines,
)
from core.errors import InternalError, InvalidPlan
from core.outbound.allowlists import Origin, UrlAllowList, url_problem
from core.outbound.http import HttpReply, RedirectRefused, is_expected, send
from core.redact import url_without_credentials
from core.settings import Settings

Worst = Literal["max", "min"]
State = Literal["held", "pending", "cannot"]
PROMETHEUS_BODY_LIMIT = 1_048_576
_PROBE_BODY_LIMIT = 4096
STAND_IN = "stand-in readings (OPSGATE_STATIC_METRICS)"
"""The label of every verdict read from a stand-in table: the timeline, thread and card say it."""
CLIENT_GRACE_S = 1.0
"""How much longer than Prometheus' own ``timeout`` the HTTP client waits: the server's answer
that it timed out still arrives."""
STAND_IN_SETTLE_S = 60.0
"""How long after the change a reacting stand-in still reads its before-change values (times
``OPSGATE_VERIFY_TIME_SCALE``): a change takes a moment to show in the metrics."""


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


class PrometheusSource:
    """Instant queries against Prometheus' HTTP API (``GET /api/v1/query``), evaluated at the
    reading's time (``time=``) when one is given. A query is checked against ``bounds`` for the
    case whose scope value (its tenant) is ``scope`` before it is sent (``QueryRefused``), and
    asks Prometheus to give up after ``bounds.timeout_s`` (``QueryTimedOut``).

    The window of a check with ``for_s`` is opsgate's own subquery around the checked query,
    ``max_over_time((q)[for_s:])``, evaluated at the server's evaluation interval: its range is
    the plan's ``for_s`` (at most a day, ``core/domain/verify.py``), bounded by the timeout."""

    def __init__(self, base_url: str, timeout_s: float | None = None, *,
                 bounds: QueryBounds | None = None, scope: str | None = None) -> None:
        self._base = base_url
        self._endpoint = httpx.URL(base_url.rstrip("/") + "/api/v1/query")
        bounds = bounds or QueryBounds()
        self.bounds = bounds if timeout_s is None else replace(bounds, timeout_s=timeout_s)
        self.scope = scope

    def scoped(self, scope: str | None) -> PrometheusSource:
        """The same Prometheus, reading for the case whose scope value is ``scope``."""
        return PrometheusSource(self._base, bounds=self.bounds, scope=scope)

    def read(self, query: str, *, over_s: float | None = None, worst: Worst = "max",
             at: datetime | None = None) -> float:
        verdict = check_query(query, self.bounds, self.scope)
        if not verdict.allowed:
            raise QueryRefused(f"the query is {verdict.reason}")
        expr = query if over_s is None else f"{worst}_over_time(({query})[{duration(over_s)}:])"
        params: dict[str, str] = {"query": expr, "timeout": seconds_param(self.bounds.timeout_s)}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        reply = prometheus_get(self._endpoint, self._endpoint.copy_merge_params(params),
                               self.bounds.timeout_s + CLIENT_GRACE_S)
        return prometheus_value(reply.body, worst, status=reply.status)


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


def promql_bounds(settings: Settings) -> QueryBounds:
    """The bounds of every PromQL query opsgate sends (``OPSGATE_PROMQL_*``)."""
    return QueryBounds(max_range_s=settings.promql_max_range_s,
                       min_step_s=settings.promql_min_step_s,
                       scope_label=settings.promql_scope_label,
                       timeout_s=settings.promql_timeout_s)


def source_from_settings(settings: Settings) -> MetricSource | None:
    """Prometheus when ``OPSGATE_PROMETHEUS_URL`` is set, else the stand-in table of
    ``OPSGATE_STATIC_METRICS`` when one is set, else None: no metrics source."""
    if settings.prometheus_url:
        return PrometheusSource(settings.prometheus_url, bounds=promql_bounds(settings))
    if settings.static_metrics:
        return StaticSource(settings.static_metrics, settings.static_metrics_before_change,
                            settle_s=STAND_IN_SETTLE_S * settings.verify_time_scale)
    return None


def has_metrics_source(settings: Settings) -> bool:
    """Whether a metric check can be read at all (Prometheus, or a stand-in table)."""
    return bool(settings.prometheus_url or settings.static_metrics)


def metrics_source_line(settings: Settings) -> str:
    """Where metric checks are read, in one line (the serve banner, ``/readyz``)."""
    if settings.prometheus_url:
        return f"Prometheus at {url_without_credentials(settings.prometheus_url)}"
    if settings.static_metrics:
        return ("a stand-in table (OPSGATE_STATIC_METRICS): its readings are labelled stand-in "
                "and never make a verified fix")
    return f"none: plans with a metric check are refused; {NO_METRICS_SOURCE}"


def for_case(source: MetricSource, scope: str | None) -> MetricSource:
    """``source`` as it reads for a case whose scope value (its tenant) is ``scope``: Prometheus
    checks each query against it; a stand-in table sends no query."""
    return source.scoped(scope) if isinstance(source, PrometheusSource) else source


def after_change(source: MetricSource, changed_at: datetime) -> MetricSource:
    """``source`` as it reads the world after the change that finished at ``changed_at``: a
    stand-in table reacts to it; a real source needs no telling."""
    return source.after_change(changed_at) if isinstance(source, StaticSource) else source


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


def evaluate(verify: Any, source: MetricSource, probe_allowlist: UrlAllowList, *,
             timeout_s: float = 10.0, moment: Moment | None = None) -> VerifyOutcome:
    """One reading of ``verify`` against ``source`` (metrics) and allow-listed HTTP probes."""
    try:
        block = parse_verify(verify)
    except InvalidPlan:
        return _cannot("; ".join(problem_lines(verify)))
    return read_block(block, source, probe_allowlist, moment or Moment(), timeout_s=timeout_s)


def read_block(block: VerifyBlock, source: MetricSource, allowlist: UrlAllowList,
               moment: Moment, *, timeout_s: float = 10.0) -> VerifyOutcome:
    """One reading of a parsed block: every check in order until one does not hold."""
    refused = _refused_probes(block, allowlist)
    if refused is not None:
        return refused
    count = len(block.checks)
    for number, check in enumerate(block.checks, start=1):
        outcome = (_metric(check, source, moment) if isinstance(check, MetricCheck)
                   else _probe(check.probe, allowlist, timeout_s))
        if not block.listed:
            return outcome
        if not outcome.passed:
            return replace(outcome, reason=f"check {number} of {count}: {outcome.reason}")
    return VerifyOutcome("held", "the check passed" if count == 1 else f"all {count} checks passed")


def _refused_probes(block: VerifyBlock, allowlist: UrlAllowList) -> VerifyOutcome | None:
    """A probe the verifier may never call makes the block unjudgeable before any reading."""
    for check in block.checks:
        if isinstance(check, ProbeCheck):
            _url, problem = _probe_url(check.probe, allowlist)
            if problem is not None:
                return _cannot(problem)
    return None


def _cannot(why: str) -> VerifyOutcome:
    return VerifyOutcome("cannot", f"cannot verify: {why}")


def _metric(check: MetricCheck, source: MetricSource, moment: Moment) -> VerifyOutcome:
    window_s = check.window_s(moment.scale)
    if window_s and moment.elapsed_s() < window_s:
        return _waiting(check, source, moment, window_s)
    window = f" over {window_s:g}s" if window_s else ""
    observed: float | None = None
    bounds: tuple[tuple[str, float | None, Worst], ...] = (
        ("below", check.below, "max"), ("above", check.above, "min"))
    for bound, limit, worst in bounds:
        if limit is None:
            continue
        try:
            observed = source.read(check.metric, over_s=window_s or None, worst=worst,
                                   at=moment.at)
        except QueryRefused as exc:
            return _cannot(f"{check.metric}: {exc.reason}")
        except EvidenceMissing as exc:
            return VerifyOutcome("pending", f"{check.metric}: {exc.reason}",
                                 waiting_for=check.condition(moment.scale),
                                 timed_out=isinstance(exc, QueryTimedOut))
        held = observed < limit if bound == "below" else observed > limit
        if not held:
            return VerifyOutcome(
                "pending", f"{check.metric} = {observed:g}{window}, not {bound} {limit:g}",
                observed, check.condition(moment.scale))
    return VerifyOutcome("held", f"{check.metric} = {observed:g}{window}, {check.bounds()}",
                         observed)


def _waiting(check: MetricCheck, source: MetricSource, moment: Moment,
             window_s: float) -> VerifyOutcome:
    """Before the window after the change has passed: the value now, as news, not a verdict."""
    elapsed = max(0.0, moment.elapsed_s())
    shown = f"{elapsed:.0f}" if window_s >= 10 else f"{elapsed:.1f}"  # the demo's short windows
    waiting = f"waiting ({shown}s of the {window_s:g}s window after the change)"
    worst: Worst = "max" if check.below is not None else "min"
    timed_out = False
    try:
        observed: float | None = source.read(check.metric, worst=worst, at=moment.at)
    except QueryRefused as exc:
        return _cannot(f"{check.metric}: {exc.reason}")
    except EvidenceMissing as exc:
        observed, now, timed_out = None, exc.reason, isinstance(exc, QueryTimedOut)
    else:
        now = f"= {observed:g} now"
    return VerifyOutcome("pending", f"{check.metric} {now}, {waiting}", observed,
                         check.condition(moment.scale), timed_out=timed_out)


def _probe_url(target: ProbeTarget, allowlist: UrlAllowList) -> tuple[httpx.URL | None,
                                                                      str | None]:
    try:
        url = httpx.URL(target.url)
    except httpx.InvalidURL as exc:
        return None, f"probe url {target.url!r} is not a URL: {exc}"
    problem = url_problem(url)
    if problem or not allowlist.allows(url):
        why = problem or "not on the http allow-list (OPSGATE_HTTP_ALLOWLIST)"
        return None, f"probe url {target.url} refused: {why}"
    return url, None


def _probe(target: ProbeTarget, allowlist: UrlAllowList, timeout_s: float) -> VerifyOutcome:
    url, problem = _probe_url(target, allowlist)
    if url is None:
        return _cannot(problem or "probe url refused")
    condition = ProbeCheck(probe=target).condition()
    try:
        reply = send("GET", url, allowed=allowlist.allows, timeout_s=timeout_s,
                     body_limit=_PROBE_BODY_LIMIT)
    except RedirectRefused as exc:
        return VerifyOutcome("pending", f"probe {target.url}: {exc}", waiting_for=condition)
    except httpx.HTTPError as exc:
        return VerifyOutcome("pending", f"probe {target.url}: {type(exc).__name__}: {exc}",
                             waiting_for=condition)
    passed = is_expected(reply.status, target.expect_status)
    verdict = "as expected" if passed else "not expected"
    return VerifyOutcome("held" if passed else "pending",
                         f"probe {target.url} → {reply.status} ({verdict})",
                         float(reply.status), None if passed else condition)
