"""What the verifier reads to judge a plan's ``verify`` block, and the judgement itself.

Accepted ``verify`` shapes (anything else is a "cannot verify: …" failure, never an exception):

    {"metric": "<PromQL or name>", "below"?: number, "above"?: number, "for_s"?: seconds}
        at least one bound; comparisons are strict. With several series the worst one counts
        (the highest for ``below``, the lowest for ``above``); with ``for_s`` the worst value
        over that window counts (Prometheus: ``max_over_time((q)[Ns:])``).
    {"probe": {"url": "<allow-listed URL>", "expect_status"?: [int, ...]}}
        a GET; passes on an expected status (any 2xx when none is named).
    {"checks": [<metric or probe check>, ...]}
        every check must pass; the first failure is the reason.

Sources: ``PrometheusSource`` (the HTTP query API) and ``StaticSource`` (embedded default).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.executor.allowlists import Origin, UrlAllowList, url_problem
from core.executor.http_client import HttpReply, RedirectRefused, is_expected, send
from core.settings import Settings

Worst = Literal["max", "min"]
PROMETHEUS_BODY_LIMIT = 1_048_576
_PROBE_BODY_LIMIT = 4096


@dataclass(frozen=True)
class VerifyOutcome:
    passed: bool
    reason: str  # one line for the timeline: what was observed against what was required
    observed: float | None = None  # the metric value, or the probe's HTTP status


class EvidenceMissing(Exception):
    """A source could not produce a value (no data, NaN, unreachable): the check fails."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MetricSource(Protocol):
    def read(self, query: str, *, over_s: int | None = None, worst: Worst = "max") -> float:
        """The value of ``query`` (the ``worst`` series, over ``over_s`` seconds when given);
        ``EvidenceMissing`` when there is none."""
        ...


class StaticSource:
    """Fixed values by metric name: the embedded default and tests. Time windows change nothing."""

    def __init__(self, values: Mapping[str, float]) -> None:
        self._values = dict(values)

    def read(self, query: str, *, over_s: int | None = None, worst: Worst = "max") -> float:
        if query not in self._values:
            raise EvidenceMissing(f"no value for {query!r} in the static source")
        return self._values[query]


class PrometheusSource:
    """Instant queries against Prometheus' HTTP API (``GET /api/v1/query``)."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self._endpoint = httpx.URL(base_url.rstrip("/") + "/api/v1/query")
        self._timeout_s = timeout_s

    def read(self, query: str, *, over_s: int | None = None, worst: Worst = "max") -> float:
        expr = query if over_s is None else f"{worst}_over_time(({query})[{over_s}s:])"
        reply = prometheus_get(self._endpoint, self._endpoint.copy_add_param("query", expr),
                               self._timeout_s)
        return prometheus_value(reply.body, worst, status=reply.status)


def prometheus_get(endpoint: httpx.URL, url: httpx.URL, timeout_s: float) -> HttpReply:
    """``GET url`` from Prometheus, following redirects only on ``endpoint``'s origin; an
    unreachable server or an oversized answer is ``EvidenceMissing``."""
    origin = Origin.of(endpoint)
    try:
        reply = send("GET", url, allowed=lambda u: Origin.of(u) == origin,
                     timeout_s=timeout_s, body_limit=PROMETHEUS_BODY_LIMIT)
    except (httpx.HTTPError, RedirectRefused) as exc:
        raise EvidenceMissing(f"Prometheus unreachable: {type(exc).__name__}: {exc}") from exc
    if reply.truncated:
        raise EvidenceMissing(f"Prometheus answer over {PROMETHEUS_BODY_LIMIT} bytes")
    return reply


def prometheus_answer(body: bytes, status: int = 200) -> dict[str, Any]:
    """Prometheus' answer document when it says ``success``; otherwise ``EvidenceMissing``
    saying why (no JSON, or the server's own error text)."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise EvidenceMissing(f"Prometheus answered HTTP {status} without JSON") from exc
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error", "no error text") if isinstance(doc, dict) else "not an object"
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


def source_from_settings(settings: Settings, static_values: Mapping[str, float] | None = None,
                         ) -> MetricSource:
    """Prometheus when ``OPSGATE_PROMETHEUS_URL`` is set, else a static source."""
    if settings.prometheus_url:
        return PrometheusSource(settings.prometheus_url)
    return StaticSource(static_values or {})


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


Shape = TypeVar("Shape", bound=_Shape)


class MetricCheck(_Shape):
    metric: str = Field(min_length=1, max_length=2000)
    below: float | None = None
    above: float | None = None
    for_s: int | None = Field(default=None, ge=1, le=86400)

    @model_validator(mode="after")
    def _has_bound(self) -> MetricCheck:
        if self.below is None and self.above is None:
            raise ValueError("a metric check needs 'below' or 'above'")
        return self


class ProbeTarget(_Shape):
    url: str = Field(min_length=1, max_length=2048)
    expect_status: list[Annotated[int, Field(ge=100, le=599)]] | None = Field(
        default=None, min_length=1, max_length=20)


class ProbeCheck(_Shape):
    probe: ProbeTarget


class ChecksBlock(_Shape):
    checks: list[Any] = Field(min_length=1, max_length=20)


def evaluate(verify: Any, source: MetricSource, probe_allowlist: UrlAllowList, *,
             timeout_s: float = 10.0) -> VerifyOutcome:
    """Judge ``verify`` against ``source`` (metrics) and allow-listed HTTP probes."""
    if not isinstance(verify, Mapping):
        return _cannot(f"the verify block must be an object, not {type(verify).__name__}")
    if "checks" in verify:
        return _evaluate_all(verify, source, probe_allowlist, timeout_s)
    return _evaluate_one(verify, source, probe_allowlist, timeout_s)


def _evaluate_all(verify: Mapping[str, Any], source: MetricSource, allowlist: UrlAllowList,
                  timeout_s: float) -> VerifyOutcome:
    block = _shape(ChecksBlock, verify)
    if isinstance(block, VerifyOutcome):
        return block
    for number, check in enumerate(block.checks, start=1):
        outcome = _evaluate_one(check, source, allowlist, timeout_s)
        if not outcome.passed:
            where = f"check {number} of {len(block.checks)}"
            return VerifyOutcome(False, f"{where}: {outcome.reason}", outcome.observed)
    count = len(block.checks)
    return VerifyOutcome(True, "the check passed" if count == 1 else f"all {count} checks passed")


def _evaluate_one(check: Any, source: MetricSource, allowlist: UrlAllowList,
                  timeout_s: float) -> VerifyOutcome:
    if not isinstance(check, Mapping):
        return _cannot(f"a check must be an object, not {type(check).__name__}")
    if "metric" in check:
        metric = _shape(MetricCheck, check)
        return metric if isinstance(metric, VerifyOutcome) else _metric(metric, source)
    if "probe" in check:
        probe = _shape(ProbeCheck, check)
        return probe if isinstance(probe, VerifyOutcome) else _probe(probe.probe, allowlist,
                                                                     timeout_s)
    return _cannot(f"expected 'metric', 'probe' or 'checks'; got {sorted(map(str, check))}")


def _shape(model: type[Shape], block: Mapping[str, Any]) -> Shape | VerifyOutcome:
    """``block`` as ``model``, or the "cannot verify" outcome listing its problems."""
    try:
        return model.model_validate(dict(block))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'verify'}: {e['msg']}"
            for e in exc.errors(include_url=False))
        return _cannot(problems)


def _cannot(why: str) -> VerifyOutcome:
    return VerifyOutcome(False, f"cannot verify: {why}")


def _metric(check: MetricCheck, source: MetricSource) -> VerifyOutcome:
    window = f" over {check.for_s}s" if check.for_s else ""
    observed: float | None = None
    bounds: tuple[tuple[str, float | None, Worst], ...] = (
        ("below", check.below, "max"), ("above", check.above, "min"))
    for bound, limit, worst in bounds:
        if limit is None:
            continue
        try:
            observed = source.read(check.metric, over_s=check.for_s, worst=worst)
        except EvidenceMissing as exc:
            return VerifyOutcome(False, f"{check.metric}: {exc.reason}")
        held = observed < limit if bound == "below" else observed > limit
        if not held:
            return VerifyOutcome(
                False, f"{check.metric} = {observed:g}{window}, not {bound} {limit:g}", observed)
    return VerifyOutcome(True, f"{check.metric} = {observed:g}{window}, {_bounds(check)}",
                         observed)


def _bounds(check: MetricCheck) -> str:
    parts = [f"{name} {limit:g}" for name, limit in (("below", check.below),
                                                     ("above", check.above))
             if limit is not None]
    return " and ".join(parts)


def _probe(target: ProbeTarget, allowlist: UrlAllowList, timeout_s: float) -> VerifyOutcome:
    try:
        url = httpx.URL(target.url)
    except httpx.InvalidURL as exc:
        return _cannot(f"probe url {target.url!r} is not a URL: {exc}")
    problem = url_problem(url)
    if problem or not allowlist.allows(url):
        why = problem or "not on the http allow-list (OPSGATE_HTTP_ALLOWLIST)"
        return _cannot(f"probe url {target.url} refused: {why}")
    try:
        reply = send("GET", url, allowed=allowlist.allows, timeout_s=timeout_s,
                     body_limit=_PROBE_BODY_LIMIT)
    except RedirectRefused as exc:
        return VerifyOutcome(False, f"probe {target.url}: {exc}")
    except httpx.HTTPError as exc:
        return VerifyOutcome(False, f"probe {target.url}: {type(exc).__name__}: {exc}")
    passed = is_expected(reply.status, target.expect_status)
    verdict = "as expected" if passed else "not expected"
    return VerifyOutcome(passed, f"probe {target.url} → {reply.status} ({verdict})",
                         float(reply.status))
