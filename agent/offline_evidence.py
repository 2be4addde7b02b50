"""The offline planner's reasoning: what the looks' answers show, and which change follows from
them. Pure — it reads the answers of ``query_metrics``, ``recent_changes``, ``list_alerts``,
``kube_objects`` and ``kube_events`` (and the library's most similar verified case) and decides,
the way a careful SRE would, in this order:

1. no metric is anomalous now (an anomaly that ended before the report, or none) → no change;
2. a deploy or config change of the component shortly before the change point → roll it back;
3. a verified past case whose plan checks a metric that is anomalous now → that plan;
4. a working set climbing (or pods killed for memory) with no change → restart;
5. errors at a wall while a standby shows headroom → fail over;
6. CPU saturated under a growing request rate → scale out;
7. errors or latency up with none of the above → restart.

A metric's meaning is read from its name (errors, latency, memory, CPU, load, standby); every
reason is a sentence naming the look it rests on. No rule reads the incident's words: the report
and the thread may be wrong, or hostile."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

Action = Literal["rollback", "restart", "scale", "failover", "no change", "learned"]
Kind = Literal["errors", "latency", "memory", "cpu", "load", "standby", "other"]
KINDS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    ("standby", re.compile(r"standby|secondary|failover")),
    ("errors", re.compile(r"5xx|error|fail")),
    ("latency", re.compile(r"latency|p9\d|duration|response_time")),
    ("memory", re.compile(r"memory|working_set|rss|heap")),
    ("cpu", re.compile(r"cpu|saturation")),
    ("load", re.compile(r"requests|request_rate|rps|qps|throughput|traffic")),
)
BAD_WHEN_UP: tuple[Kind, ...] = ("errors", "latency", "memory", "cpu")
RISE = 1.5  # a value this many times its start is anomalous
LOAD_GROWTH = 1.3
CLEARED = 0.25  # back within a quarter of the way from its start to its peak
HEADROOM = 0.7  # a standby's saturation below this can take the traffic
SATURATED = 0.75
CHANGE_BEFORE = timedelta(hours=1)  # a change this long before the change point can be its cause
CHANGE_AFTER = timedelta(minutes=3)  # ... or this little after it (a point's step)


def kind_of(metric: str) -> Kind:
    for kind, pattern in KINDS:
        if pattern.search(metric.lower()):
            return kind
    return "other"


@dataclass(frozen=True)
class Signal:
    """One series over the looked-at window, as ``query_metrics`` summarised it."""

    metric: str
    first: float
    last: float
    peak: float
    changed_at: datetime | None
    query: str = ""  # what query_metrics read it with: the component's series, its labels on

    @property
    def measured(self) -> str:
        """What a verify check of it reads: the query it was read with, which selects the
        component's series as the plan_ready guard asks (else its bare name)."""
        return self.query or self.metric

    @property
    def kind(self) -> Kind:
        return kind_of(self.metric)

    @property
    def state(self) -> Literal["ongoing", "ended", "steady"]:
        if self.kind not in BAD_WHEN_UP:
            return "steady"
        if self.last >= self.first * RISE and self.last > self.first:
            return "ongoing"
        if self.peak >= self.first * RISE and self.last - self.first <= (
                self.peak - self.first) * CLEARED:
            return "ended"
        return "steady"

    @property
    def growing(self) -> bool:
        return self.last >= self.first * LOAD_GROWTH

    def fig(self, value: float) -> str:
        return _figure(value, self.metric)

    def said(self) -> str:
        when = f" since {self.changed_at:%H:%M}" if self.changed_at else ""
        if self.state == "ended":
            return (f"{self.metric} peaked at {self.fig(self.peak)} and is back to "
                    f"{self.fig(self.last)} (query_metrics)")
        return (f"{self.metric} went from {self.fig(self.first)} to {self.fig(self.last)}"
                f"{when} (query_metrics)")


@dataclass(frozen=True)
class Decision:
    """The change the evidence calls for, why (sentences citing looks), and how to check it."""

    action: Action
    because: tuple[str, ...]
    checks: tuple[dict[str, Any], ...] = ()
    change: Mapping[str, Any] | None = None  # the change to roll back
    notes: tuple[str, ...] = field(default=())
    replicas: int | None = None  # a scale's target, when a person named it

    def findings(self) -> str:
        return "; ".join((*self.because, *self.notes)) + "."


@dataclass(frozen=True)
class Looked:
    """What the looks answered (each list holds the successful answers of that look)."""

    metrics: Sequence[Mapping[str, Any]] = ()
    changes: Sequence[Mapping[str, Any]] = ()
    alerts: Sequence[Mapping[str, Any]] = ()
    pods: Sequence[Mapping[str, Any]] = ()
    events: Sequence[Mapping[str, Any]] = ()
    metrics_refused: str | None = None

    def signals(self) -> list[Signal]:
        found = []
        for answer in _maps(self.metrics):
            for series in _maps(answer.get("series")):
                signal = _signal(answer, series)
                if signal is not None:
                    found.append(signal)
        return found


def decide(looked: Looked, opened_at: datetime, past_plan: Mapping[str, Any] | None) -> Decision:
    """The decision the looks' answers support; see the module docstring for the order."""
    signals = looked.signals()
    if not signals:
        return _without_metrics(looked, opened_at)
    ongoing = [s for s in signals if s.state == "ongoing"]
    if not ongoing:
        return _no_change(signals)
    said = tuple(s.said() for s in ongoing)
    checks = tuple(_check(s) for s in ongoing[:2])
    onset = min((s.changed_at for s in ongoing if s.changed_at), default=opened_at)
    change = _cause(looked.changes, onset)
    if change is not None:
        return Decision("rollback", (*said, _change_said(change, onset)), checks, change)
    if past_plan is not None and _plan_checks(past_plan) & {s.metric for s in ongoing}:
        return Decision("learned", said, checks)
    return _without_change(looked, signals, ongoing, said, checks)


def _without_change(looked: Looked, signals: list[Signal], ongoing: list[Signal],
                    said: tuple[str, ...], checks: tuple[dict[str, Any], ...]) -> Decision:
    quiet = "recent_changes shows no change of the component before it"
    killed = _oom_killed(looked.pods)
    memory = [s for s in ongoing if s.kind == "memory"]
    if memory or killed:
        return Decision("restart", (*said, *killed, quiet), checks)
    standby = [s for s in signals if s.kind == "standby"]
    if any(s.kind == "errors" for s in ongoing) and standby and standby[0].last < HEADROOM:
        spare = standby[0]
        room = (f"the standby's {spare.metric} is {spare.fig(spare.last)}: it has headroom "
                "(query_metrics)")
        return Decision("failover", (*said, room, quiet), checks)
    cpu = [s for s in ongoing if s.kind == "cpu" and s.last >= SATURATED]
    load = [s for s in signals if s.kind == "load"]
    if cpu and (not load or load[0].growing):
        grew = [f"{load[0].metric} grew from {load[0].fig(load[0].first)} to "
                f"{load[0].fig(load[0].last)} (query_metrics)"] if load else []
        felt = [s for s in ongoing if s.kind in ("latency", "errors")][:2]
        return Decision("scale", (*said, *grew, quiet), (
            *(_check(s) for s in felt),
            {"metric": cpu[0].measured, "below": SATURATED, "for_s": 300}))
    return Decision("restart", (*said, quiet, "nothing points at memory, capacity or a "
                                              "region: the service itself is stuck"), checks)


def _no_change(signals: list[Signal]) -> Decision:
    ended = [s for s in signals if s.state == "ended"]
    watched = ended or [s for s in signals if s.kind in BAD_WHEN_UP][:2] or signals[:1]
    because = ([s.said() for s in ended] + ["the anomaly ended before the report"] if ended
               else ["every metric of the component is steady over the last two hours "
                     "(query_metrics): there is no anomaly to act on"])
    checks = tuple({"metric": s.measured, "for_s": 60, "below": _round(
        s.first * RISE if s.state == "ended" else max(s.first, s.last) * RISE)}
        for s in watched[:2])
    return Decision("no change", tuple(because), checks)


def _without_metrics(looked: Looked, opened_at: datetime) -> Decision:
    """No metric could be read: only a change shortly before the case opened is evidence."""
    missing = looked.metrics_refused or "no metric of the component could be read"
    change = _cause(looked.changes, opened_at)
    if change is not None:
        return Decision("rollback", (_change_said(change, opened_at, "the case opened"),),
                        notes=(f"{missing}: nothing was verified by metrics",), change=change)
    return Decision("no change", (), notes=(missing,))


def _cause(changes: Iterable[Mapping[str, Any]], onset: datetime) -> Mapping[str, Any] | None:
    """The latest change of the component in [onset - 1 h, onset + 3 min]."""
    timed = [(instant(c.get("happened_at")), c) for c in _maps(list(changes))]
    near = [(at, c) for at, c in timed
            if at is not None and onset - CHANGE_BEFORE <= at <= onset + CHANGE_AFTER]
    return max(near, key=lambda pair: pair[0])[1] if near else None


def _change_said(change: Mapping[str, Any], onset: datetime, what: str = "it began") -> str:
    at = instant(change.get("happened_at"))
    gap = "" if at is None else f", {_minutes(onset - at)} before {what}"
    version = f" {change.get('version')}" if change.get("version") else ""
    return (f"recent_changes: {change.get('kind', 'change')} of {change.get('service')}"
            f"{version} by {change.get('actor', 'someone')} at "
            f"{at:%H:%M}{gap}" if at else f"recent_changes: {change.get('kind')} "
            f"of {change.get('service')}{version}")


def _oom_killed(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    killed = []
    for answer in _maps(list(pods)):
        for pod in _maps(answer.get("pods")):
            if "OOMKilled" in str(pod.get("last_termination") or ""):
                killed.append(f"pod {pod.get('name', '?')} was OOMKilled (kube_objects)")
    return killed[:2]


def _plan_checks(plan: Mapping[str, Any]) -> set[str]:
    verify = plan.get("verify")
    checks = _maps(verify.get("checks")) if isinstance(verify, Mapping) else []
    return {_metric_of(str(check.get("metric"))) for check in checks}


def _check(signal: Signal) -> dict[str, Any]:
    """Back at its normal level: below its value before the incident with the margin that
    calls a value anomalous (``RISE``), never halfway to it; a metric that was zero before must
    fall to a tenth of where it is."""
    normal = signal.first * RISE if signal.first > 0 else signal.last / 10
    return {"metric": signal.measured, "below": _round(normal), "for_s": 300}


def _maps(found: Any) -> list[Mapping[str, Any]]:
    """The mappings among ``found`` (a tool's list, as far as it is one)."""
    if not isinstance(found, list | tuple):
        return []
    return [item for item in found if isinstance(item, Mapping)]


def _signal(answer: Mapping[str, Any], series: Mapping[str, Any]) -> Signal | None:
    labels = series.get("labels")
    named = labels.get("__name__") if isinstance(labels, Mapping) else None
    metric = str(named or _metric_of(str(answer.get("query", ""))))
    values = [_number(series.get(k)) for k in ("first", "last", "max")]
    first, last, peak = values
    if not metric or first is None or last is None or peak is None:
        return None
    change = series.get("change")
    query = str(answer.get("query") or "")
    return Signal(metric, first, last, peak,
                  instant(change.get("at")) if isinstance(change, Mapping) else None,
                  query if _metric_of(query) == metric else "")


def _number(value: Any) -> float | None:
    """A finite number as read from an answer (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _metric_of(query: str) -> str:
    found = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", query)
    return found.group(1) if found else ""


def instant(text: Any) -> datetime | None:
    """A time as an answer writes it (ISO 8601, Z or an offset; naive is UTC); None otherwise."""
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _minutes(gap: timedelta) -> str:
    minutes = round(gap.total_seconds() / 60)
    return f"{minutes} min" if abs(minutes) < 120 else f"{minutes // 60} h"


def _figure(value: float, metric: str) -> str:
    """A reading as people write it: a ratio in percent, else three significant digits."""
    if re.search(r"ratio|saturation|usage", metric) and 0 <= value <= 1:
        return f"{value:.1%}"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _round(value: float) -> float:
    return float(f"{value:.3g}")
