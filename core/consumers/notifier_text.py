"""What the notifier says in the case thread of the two facts that carry outside words: an alert
note (``evt.alert.noted.v1``) and the analyst's findings (``evt.analysis.findings.v1``). Chat
mrkdwn, the alerts' and findings' words escaped (``core.mrkdwn``); an alert's Prometheus graph is
a ``<url|graph>`` link at the end of its line, so the line still reads as plain text. Pure
functions of the event's payload; the Slack card draws its alert lines with ``alert_text``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.domain.messages import (
    AlertResolvedPayload,
    AlertSeenPayload,
    AlertsOpeningPayload,
    FindingsPayload,
    payload_as,
)
from core.mrkdwn import escape, link

MAX_LISTED = 3  # alerts named in one "Firing" line; findings, missing metrics listed

Payload = Mapping[str, Any]


def alert_text(payload: Payload) -> str | None:
    """The thread line of an alert note; None for a note this module does not know."""
    event = payload.get("event")
    if event == "alert_resolved":
        resolved = payload_as(AlertResolvedPayload, payload)
        return f"{_said(resolved, ' resolved')}{_link(resolved)}"
    if event == "alert_new":
        seen = payload_as(AlertSeenPayload, payload)
        return f"New alert in this group: {_said(seen)}{_link(seen)}"
    # Read with .get: a missing key shows as empty rather than failing the post.
    opening = payload_as(AlertsOpeningPayload, payload)
    if event == "alert_firing":
        alerts = opening.get("alerts") or []
        return f"Firing: {_listed(alerts, int(opening.get('alert_count') or len(alerts)))}"
    if event == "alert_recurrence":
        listed: Sequence[Mapping[str, Any]] = opening.get("alerts") or [{}]
        first = listed[0]
        previous = escape(str(opening.get("previous_case_id") or "")[:8])
        return (f"Recurrence {opening.get('recurrence')} of {escape(opening.get('title'))}; "
                f"previous case {previous}{_link(first)}")
    return None


def _said(alert: Mapping[str, Any], verb: str = "") -> str:
    summary = alert.get("summary")
    words = f"{alert.get('alertname') or 'alert'}{verb}"
    return escape(f"{words}: {summary}" if summary else words)


def _listed(alerts: Sequence[Mapping[str, Any]], count: int) -> str:
    shown = "; ".join(f"{_said(a)}{_link(a)}" for a in alerts[:MAX_LISTED])
    more = count - min(len(alerts), MAX_LISTED)
    return f"{shown}; and {more} more" if more > 0 else shown


def _link(alert: Mapping[str, Any]) -> str:
    graph = link(alert.get("url"), "graph")
    return f" {graph}" if graph else ""


def findings_text(raw: Payload) -> str:
    """Findings, then similar past cases and runbooks, one line each."""
    # Read with .get: a missing key shows as empty rather than failing the post.
    payload = payload_as(FindingsPayload, raw)
    findings: Sequence[Mapping[str, Any]] = payload.get("findings") or []
    lines = [_headline(payload)]
    lines += [f"• {escape(f.get('summary'))} (confidence {float(f.get('confidence', 0)):.0%})"
              for f in findings[:MAX_LISTED]]
    lines += [f"• missing {escape(m.get('metric'))}: {escape(m.get('reason'))}"
              for m in (payload.get("missing") or [])[:MAX_LISTED]]
    lines += [f"Similar: {_similar(c)}" for c in (payload.get("similar_cases") or [])]
    lines += [f"Runbook: {escape(r.get('title'))}" for r in (payload.get("runbooks") or [])]
    return "\n".join(lines)


def _headline(payload: FindingsPayload) -> str:
    findings = payload.get("findings") or []
    checked = escape(", ".join(payload.get("checked") or []) or "no metric")
    if not findings:
        return f"Analysis: no significant change in {checked}"
    return f"Analysis: {len(findings)} finding(s) in {checked}"


def _similar(case: Mapping[str, Any]) -> str:
    return (f"{escape(case.get('title'))} "
            f"(resolved by {escape(case.get('resolved_by') or 'its plan')})")
