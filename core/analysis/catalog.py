"""Which metrics a case names: words of its title (or an alert's name, ``HighErrorRate`` read as
"high error rate") → metrics of a small catalog, extended or replaced by
``OPSGATE_METRIC_CATALOG``. A title that names none gets the golden signals."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.analysis.stats import Kind


@dataclass(frozen=True)
class MetricSpec:
    """One metric the analyst can read: its name (the recorded file's name), the PromQL query,
    how to judge it, and the word stems in a title that name it."""

    name: str
    query: str
    kind: Kind
    words: tuple[str, ...]


DEFAULT_CATALOG: tuple[MetricSpec, ...] = (
    MetricSpec("latency_p95_ms",
               "histogram_quantile(0.95, sum by (le) "
               "(rate(http_request_duration_seconds_bucket[5m]))) * 1000",
               "level", ("latenc", "slow", "p95", "p99", "timeout", "respons")),
    MetricSpec("http_5xx_ratio",
               'sum(rate(http_requests_total{code=~"5.."}[5m])) '
               "/ sum(rate(http_requests_total[5m]))",
               "ratio", ("error", "5xx", "500", "502", "503", "fail")),
    MetricSpec("memory_working_set_bytes", "sum(container_memory_working_set_bytes)",
               "level", ("memor", "leak", "oom", "rss", "heap")),
    MetricSpec("cpu_usage_ratio", "sum(rate(container_cpu_usage_seconds_total[5m]))",
               "level", ("cpu", "saturat", "throttl")),
)
GOLDEN_SIGNALS = ("latency_p95_ms", "http_5xx_ratio")


def catalog(overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, MetricSpec]:
    """The default catalog with ``overrides`` (name → query/kind/words) applied; a bad entry
    raises ``ValueError`` naming it."""
    specs = {spec.name: spec for spec in DEFAULT_CATALOG}
    for name, entry in (overrides or {}).items():
        known = specs.get(name)
        kind = entry.get("kind", known.kind if known else "level")
        query = entry.get("query", known.query if known else None)
        words = entry.get("words", known.words if known else (name,))
        if kind not in ("level", "ratio") or not isinstance(query, str) or not query:
            raise ValueError(f"metric catalog entry {name!r} needs a query and kind level|ratio")
        specs[name] = MetricSpec(name, query, kind, tuple(str(w).lower() for w in words))
    return specs


def title_words(title: str) -> list[str]:
    """Lower-case words of a title; CamelCase alert names are split (``HighErrorRate``)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", title)
    return re.findall(r"[a-z0-9]+", spaced.lower())


def metrics_for(title: str, specs: Mapping[str, MetricSpec]) -> list[MetricSpec]:
    """The catalog metrics ``title`` names, in catalog order; the golden signals when none."""
    words = title_words(title)
    named = [spec for spec in specs.values()
             if any(word.startswith(stem) for word in words for stem in spec.words)]
    if named:
        return named
    return [specs[name] for name in GOLDEN_SIGNALS if name in specs]
