"""Which catalog components show symptoms now, for a report that names none ("customers are
complaining", "users in India cannot reach the app"): each component's firing alerts (Alertmanager,
by its metric labels) and how far its metrics moved over the two hours before the case (the
largest relative move of each series Prometheus summarises). The candidates come ranked, most
anomalous first, with a sentence naming them; a component that shows nothing is no candidate, so
a report nothing backs leads to no component rather than to an unrelated one.

The reads go through the same readers and scope checks as every look (one component at a time,
its own labels), bounded: at most ``MAX_COMPONENTS`` components and ``MAX_METRICS`` metrics each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from core.catalog.model import Catalog
from core.errors import OpsgateError
from core.investigate.scope import OutOfScope, Target, scope_of

if TYPE_CHECKING:
    from core.investigate.looks import AlertReads, MetricReads

MAX_COMPONENTS = 12
MAX_METRICS = 6
MAX_CANDIDATES = 3
WINDOW = timedelta(hours=2)
MOVED = 0.5  # a series whose last value is this far (relative) from its first has moved
FIRING = ("active", "firing")


@dataclass(frozen=True)
class Candidate:
    """One component with symptoms: its firing alerts, the metrics that moved (name, from, to),
    and its score (an alert counts one, a move its relative size, at most ten)."""

    name: str
    alerts: tuple[str, ...]
    moved: tuple[tuple[str, float, float], ...]

    @property
    def score(self) -> float:
        return len(self.alerts) + sum(min(_relative(a, b), 10.0) for _, a, b in self.moved)

    def said(self) -> str:
        parts = [f"alert {name} firing" for name in self.alerts[:2]]
        parts += [f"{metric} {_fig(a)} → {_fig(b)}" for metric, a, b in self.moved[:2]]
        return f"{self.name} ({'; '.join(parts)})"

    def answer(self) -> dict[str, Any]:
        return {"name": self.name, "firing": list(self.alerts),
                "moved": [{"metric": m, "from": a, "to": b} for m, a, b in self.moved],
                "score": round(self.score, 2)}


def by_symptoms(catalog: Catalog, metrics: MetricReads | None, alerts: AlertReads | None,
                opened_at: datetime, now: datetime) -> list[Candidate]:
    """The components with firing alerts or moved metrics, most anomalous first."""
    found = []
    for name in sorted(catalog.components)[:MAX_COMPONENTS]:
        try:
            target = scope_of(catalog, [name], None).metrics(name)
        except OutOfScope:
            continue  # no metric labels: nothing of it can be read
        candidate = Candidate(name, _firing(alerts, target),
                              _moved(metrics, target, opened_at, now))
        if candidate.alerts or candidate.moved:
            found.append(candidate)
    return sorted(found, key=lambda c: (-c.score, c.name))[:MAX_CANDIDATES]


def candidates_said(found: list[Candidate]) -> str:
    """The sentence for the thread: which components show symptoms, and which is looked at."""
    if not found:
        return ("The report names no service, and no catalog component has a firing alert or "
                "a metric that moved: there is no candidate to investigate.")
    named = ", ".join(c.said() for c in found)
    return (f"The report names no service; by what is firing and which metrics moved, the "
            f"candidates are {named}. I investigate {found[0].name}, the most anomalous.")


def _firing(alerts: AlertReads | None, target: Target) -> tuple[str, ...]:
    if alerts is None:
        return ()
    try:
        answer = alerts.alerts(target)
    except OpsgateError:
        return ()
    return tuple(dict.fromkeys(str(a.get("alertname")) for a in answer.get("alerts") or ()
                               if isinstance(a, Mapping) and a.get("state") in FIRING
                               and a.get("alertname")))


def _moved(metrics: MetricReads | None, target: Target, opened_at: datetime,
           now: datetime) -> tuple[tuple[str, float, float], ...]:
    if metrics is None:
        return ()
    try:
        listing = metrics.list_metrics(target, case_started_at=opened_at, now=now)
        selector = str(listing.get("selector") or "")
        moved = []
        for metric in [str(m) for m in listing.get("metrics") or ()][:MAX_METRICS]:
            answer = metrics.query(target, f"{metric}{selector}", case_started_at=opened_at,
                                   now=now, start=opened_at - WINDOW, end=now, step_s=60)
            for series in answer.get("series") or ():
                first, last = series.get("first"), series.get("last")
                if _number(first) and _number(last) and _relative(first, last) >= MOVED:
                    moved.append((metric, float(first), float(last)))
                    break
    except OpsgateError:
        return ()
    return tuple(sorted(moved, key=lambda m: -_relative(m[1], m[2])))


def _relative(first: float, last: float) -> float:
    return abs(last - first) / max(abs(first), 1e-9)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fig(value: float) -> str:
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
