"""What a look is doing, in the words the case's card shows while the agent works ("querying
http_5xx_ratio for payments-api, 13:30 to 14:30"). Pure."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.investigate.looks import CaseLooks

FUNCTIONS = {"rate", "irate", "increase", "sum", "avg", "max", "min", "count", "by", "without",
             "histogram_quantile", "delta", "deriv", "topk", "bottomk", "max_over_time",
             "min_over_time", "avg_over_time", "sum_over_time", "quantile_over_time"}


def look_words(tool: str, args: Any, looks: CaseLooks) -> str:
    """One short line: what is looked at, for which component, over which window."""
    component = _component(args, looks)
    if tool == "query_metrics":
        return f"querying {_metric(args.query)} for {component}{_window(args, looks)}"
    shown = {
        "find_components": "looking the service up in the catalog",
        "list_metrics": f"listing the metrics of {component}",
        "list_alerts": f"reading the alerts of {component}",
        "kube_objects": f"reading the {getattr(args, 'kind', 'pods')} of {component}",
        "kube_events": f"reading the Kubernetes events of {component}",
        "pod_logs": f"reading the logs of pod {getattr(args, 'pod', '?')}",
        "rollout_history": f"reading the rollout history of {component}",
        "recent_changes": f"reading what changed in {component}",
        "plan_template": f"filling in the plan {getattr(args, 'template', '?')} for {component}",
    }
    return shown.get(tool, f"{tool} for {component}")


def _component(args: Any, looks: CaseLooks) -> str:
    named = getattr(args, "component", None)
    if named:
        return str(named)
    names = looks.scope.names()
    return ", ".join(names) if names else "the case"


def metric_name(query: str) -> str:
    """The first metric name a query reads ("a query" when it names none)."""
    return _metric(query)


def _metric(query: str) -> str:
    """The first metric name a query reads (not a function, keyword or grouping label)."""
    query = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ",
                   query)
    query = re.sub(r"\[[^\]]*\]", " ", query)  # a range's duration ([5m]) names no metric
    for found in re.finditer(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*", query):  # not 1e3
        word = found.group(0)
        rest = query[found.end():].lstrip()
        if word not in FUNCTIONS and not rest.startswith("(") and not rest.startswith("=") \
                and not _inside_braces(query, found.start()):
            return word
    return "a query"


def _inside_braces(query: str, at: int) -> bool:
    return query.count("{", 0, at) > query.count("}", 0, at)


def _window(args: Any, looks: CaseLooks) -> str:
    start, end = getattr(args, "start", None), getattr(args, "end", None)
    if start is None:
        return ""
    try:
        began = datetime.fromisoformat(start.replace("Z", "+00:00"))
        ended = datetime.fromisoformat(end.replace("Z", "+00:00")) if end else looks.now()
    except ValueError:
        return ""
    if ended - began > timedelta(days=1):
        return f", {began:%d %b %H:%M} to {ended:%d %b %H:%M}"
    return f", {began:%H:%M} to {ended:%H:%M}"


def change_line(change: Any) -> str:
    """A change as the card shows it: "14:02 payments-api v2.4.0 by ci" (UTC)."""
    at = change.happened_at
    when = f"{at:%H:%M}" if isinstance(at, datetime) else str(at)
    what = change.component or change.service
    version = f" {change.version}" if change.version else ""
    kind = "" if change.kind == "deploy" else f" ({change.kind})"
    return f"{when} {what}{version}{kind} by {change.actor}"
