"""What one look of the investigation said, in one line a person reads at a glance ("5xx ratio
0.19% → 7.41% from 14:04", "pod checkout-7d9: OOMKilled, 3 restarts", "deploy v1.8.0 by ci at
14:02"), and where its answer can be seen at its source (a Prometheus graph, a change's page).
Pure: plain words and ``Link``s, drawn by whichever chat shows them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from core.chat import Link
from core.investigate.words import metric_name

GIST_CHARS = 250  # Slack: a streamed task's output is at most 256 characters


def gist(tool: str, args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    """One line: what the answer of ``tool`` said (an error: why nothing was read)."""
    if answer.get("error"):
        return _cut(f"not read: {answer['error']}")
    said = _SAID.get(tool)
    return _cut(said(args, answer) if said else "answered")


def sources(tool: str, args: Mapping[str, Any], answer: Mapping[str, Any],
            prometheus_url: str | None) -> tuple[Link, ...]:
    """Where the answer can be seen: a query's Prometheus graph (when a Prometheus is
    configured), the pages of the changes it listed."""
    if tool == "query_metrics" and prometheus_url and not answer.get("error"):
        return (graph_link(prometheus_url, str(args.get("query") or "")),)
    if tool == "recent_changes":
        return tuple(Link(str(c["url"]), _change_label(c)) for c in answer.get("changes") or ()
                     if isinstance(c, Mapping) and str(c.get("url") or "").startswith(
                         ("http://", "https://")))[:3]
    return ()


def graph_link(prometheus_url: str, query: str) -> Link:
    """Prometheus' own graph page for ``query`` over the last two hours."""
    params = urlencode({"g0.expr": query, "g0.tab": "0", "g0.range_input": "2h"})
    return Link(f"{prometheus_url.rstrip('/')}/graph?{params}", f"{metric_name(query)} graph")


def number(value: Any, metric: str = "") -> str:
    """A reading as people write it: a ratio as a percentage, others to four figures."""
    if not isinstance(value, int | float):
        return "?"
    if "ratio" in metric and 0 <= value <= 1:
        return f"{value * 100:.2f}%"
    return f"{value:.4g}"


def clock(text: Any) -> str:
    """``HH:MM`` (UTC) of an ISO time; the text itself when it is not one."""
    try:
        return f"{datetime.fromisoformat(str(text).replace('Z', '+00:00')):%H:%M}"
    except ValueError:
        return str(text)


def _metrics(args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    metric = metric_name(str(args.get("query") or ""))
    series = [s for s in answer.get("series") or () if isinstance(s, Mapping)]
    if not series:
        return f"{metric}: no series"
    first = series[0]
    change = first.get("change")
    more = f" (and {len(series) - 1} more series)" if len(series) > 1 else ""
    if isinstance(change, Mapping):
        return (f"{metric} {number(change.get('before'), metric)} → "
                f"{number(change.get('after'), metric)} from {clock(change.get('at'))}{more}")
    return (f"{metric} {number(first.get('first'), metric)} → "
            f"{number(first.get('last'), metric)}, no step change{more}")


def _listing(_args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    names = [str(n) for n in answer.get("metrics") or ()]
    total = answer.get("metrics_total", len(names))
    return f"{total} metric(s): {', '.join(names[:4])}" + ("…" if len(names) > 4 else "")


def _alerts(_args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    alerts = [a for a in answer.get("alerts") or () if isinstance(a, Mapping)]
    firing = [str(a.get("alertname")) for a in alerts if a.get("state") in (None, "active",
                                                                           "firing")]
    silenced = len(answer.get("silences") or ())
    said = f"{len(firing)} firing: {', '.join(firing[:3])}" if firing else "no alert firing"
    return said + (f"; {silenced} silence(s)" if silenced else "")


def _objects(args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    kind = str(answer.get("kind") or args.get("kind") or "pods")
    found = [o for o in answer.get(kind) or () if isinstance(o, Mapping)]
    if not found:
        return f"no {kind} found"
    if kind == "pods":
        return _pods(found)
    if kind == "deployments":
        return "; ".join(_deployment(d) for d in found[:2])
    return f"{len(found)} {kind}: {', '.join(str(o.get('name')) for o in found[:3])}"


def _pods(pods: Sequence[Mapping[str, Any]]) -> str:
    troubled = [p for p in pods if p.get("restarts") or p.get("waiting") or
                p.get("last_termination") or str(p.get("ready", "1/1")).split("/")[0]
                != str(p.get("ready", "1/1")).split("/")[-1]]
    if not troubled:
        return f"{len(pods)} pod(s), all ready, no restarts"
    pod = troubled[0]
    why = [*(str(v) for v in (pod.get("waiting") or {}).values()),
           *(str(v).split(" (")[0] for v in (pod.get("last_termination") or {}).values())]
    said = f"pod {pod.get('name')}: {', '.join(dict.fromkeys(why)) or 'not ready'}"
    said += f", {pod.get('restarts')} restart(s)" if pod.get("restarts") else ""
    others = len(troubled) - 1
    return said + (f" (and {others} more pod(s) in trouble)" if others else "")


def _deployment(found: Mapping[str, Any]) -> str:
    replicas = found.get("replicas") or {}
    return (f"deployment {found.get('name')} {replicas.get('ready', '?')}/"
            f"{replicas.get('desired', '?')} ready, revision {found.get('revision', '?')}")


def _events(_args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    events = [e for e in answer.get("events") or () if isinstance(e, Mapping)]
    warnings = [e for e in events if e.get("type") == "Warning"]
    if not events:
        return "no events"
    if not warnings:
        return f"{len(events)} event(s), no warning"
    top = warnings[0]
    count = f" {top.get('count')} times" if (top.get("count") or 1) > 1 else ""
    return f"{top.get('reason')} on {top.get('object')}{count}: {top.get('message')}"


def _logs(args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    lines = str(answer.get("log") or "").splitlines()
    errors = [line for line in lines if "error" in line.lower() or "exception" in line.lower()]
    said = f"{len(lines)} line(s) of pod {args.get('pod')}"
    return said + (f", {len(errors)} with errors: {errors[-1].strip()}" if errors else "")


def _history(_args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    revisions = [r for r in answer.get("revisions") or () if isinstance(r, Mapping)]
    if not revisions:
        return "no revision recorded"
    last = revisions[-1]
    return f"{len(revisions)} revision(s); the last, {last.get('revision')}, " \
           f"at {clock(last.get('created') or last.get('at'))}"


def _changes(_args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    changes = [c for c in answer.get("changes") or () if isinstance(c, Mapping)]
    if not changes:
        return "no change recorded"
    more = f" (and {len(changes) - 1} earlier)" if len(changes) > 1 else ""
    return _change_label(changes[0]) + more


def _change_label(change: Mapping[str, Any]) -> str:
    version = f" {change.get('version')}" if change.get("version") else ""
    what = change.get("component") or change.get("service")
    return (f"{change.get('kind') or 'change'}{version} of {what}"
            f" by {change.get('actor') or 'someone'} at {clock(change.get('happened_at'))}")


def _found(_args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    names = [str(c.get("name")) for c in answer.get("components") or () if isinstance(c, Mapping)]
    return f"found {', '.join(names[:3])}" if names else "no component matches"


def _template(_args: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    plan = answer.get("plan")
    title = plan.get("title") if isinstance(plan, Mapping) else None
    return f"made: {title}" if title else "made"


_SAID = {"query_metrics": _metrics, "list_metrics": _listing, "list_alerts": _alerts,
         "kube_objects": _objects, "kube_events": _events, "pod_logs": _logs,
         "rollout_history": _history, "recent_changes": _changes, "find_components": _found,
         "plan_template": _template}


def _cut(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= GIST_CHARS else line[:GIST_CHARS - 1].rstrip() + "…"
