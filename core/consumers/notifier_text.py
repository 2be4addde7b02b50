"""What the notifier says in the case thread of the two facts that carry outside words: an alert
note (``evt.alert.noted.v1``) and the analyst's findings (``evt.analysis.findings.v1``). Plain
words (``core.chat.Said``); an alert's Prometheus graph is a ``Link`` at the end of its line, so
the line still reads as plain text. A chat front end draws them in its own format (the Slack bot
escapes the words and draws the link, and its card draws its alert lines with ``alert_text``).
Pure functions of the event's payload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.chat import Said, graph_of
from core.domain.messages import (
    AlertResolvedPayload,
    AlertSeenPayload,
    AlertsOpeningPayload,
    FindingsPayload,
    payload_as,
)

MAX_LISTED = 3  # alerts named in one "Firing" line; findings, missing metrics listed

Payload = Mapping[str, Any]


def alert_text(payload: Payload) -> Said | None:
    """The thread line of an alert note; None for a note this module does not know."""
    event = payload.get("event")
    if event == "alert_resolved":
        resolved = payload_as(AlertResolvedPayload, payload)
        return (_said(resolved, " resolved"), *graph_of(resolved.get("url")))
    if event == "alert_new":
        seen = payload_as(AlertSeenPayload, payload)
        return (f"New alert in this group: {_said(seen)}", *graph_of(seen.get("url")))
    # Read with .get: a missing key shows as empty rather than failing the post.
    opening = payload_as(AlertsOpeningPayload, payload)
    if event == "alert_firing":
        alerts = opening.get("alerts") or []
        return ("Firing: ", *_listed(alerts, int(opening.get("alert_count") or len(alerts))))
    if event == "alert_recurrence":
        listed: Sequence[Mapping[str, Any]] = opening.get("alerts") or [{}]
        previous = str(opening.get("previous_case_id") or "")[:8]
        return (f"Recurrence {opening.get('recurrence')} of {_words(opening.get('title'))}; "
                f"previous case {previous}", *graph_of(listed[0].get("url")))
    return None


def _said(alert: Mapping[str, Any], verb: str = "") -> str:
    summary = alert.get("summary")
    words = f"{alert.get('alertname') or 'alert'}{verb}"
    return f"{words}: {summary}" if summary else words


def _listed(alerts: Sequence[Mapping[str, Any]], count: int) -> Said:
    said: Said = ()
    for n, alert in enumerate(alerts[:MAX_LISTED]):
        said += ("; " if n else "", _said(alert), *graph_of(alert.get("url")))
    more = count - min(len(alerts), MAX_LISTED)
    return (*said, f"; and {more} more") if more > 0 else said


def findings_text(raw: Payload) -> str:
    """Findings, then similar past cases and runbooks, one line each."""
    # Read with .get: a missing key shows as empty rather than failing the post.
    payload = payload_as(FindingsPayload, raw)
    findings: Sequence[Mapping[str, Any]] = payload.get("findings") or []
    lines = [_headline(payload)]
    lines += [f"• {_words(f.get('summary'))} (confidence {float(f.get('confidence', 0)):.0%})"
              for f in findings[:MAX_LISTED]]
    lines += [f"• missing {_words(m.get('metric'))}: {_words(m.get('reason'))}"
              for m in (payload.get("missing") or [])[:MAX_LISTED]]
    lines += [f"Similar: {_similar(c)}" for c in (payload.get("similar_cases") or [])]
    lines += [f"Runbook: {_words(r.get('title'))}" for r in (payload.get("runbooks") or [])]
    return "\n".join(lines)


def _headline(payload: FindingsPayload) -> str:
    findings = payload.get("findings") or []
    checked = ", ".join(payload.get("checked") or []) or "no metric"
    if not findings:
        return f"Analysis: no significant change in {checked}"
    return f"Analysis: {len(findings)} finding(s) in {checked}"


def _similar(case: Mapping[str, Any]) -> str:
    return f"{_words(case.get('title'))} (resolved by {case.get('resolved_by') or 'its plan'})"


def _words(value: object) -> str:
    """A field's words; a missing one is empty."""
    return "" if value is None else str(value)
