"""How a findings fact (``evt.analysis.findings.v1``) reads in the case thread: a short text
(every chat sink) and a Block Kit summary (Slack), both mrkdwn with the findings' words escaped
(``core.mrkdwn``). Pure functions of the event's payload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.domain.messages import FindingsPayload, payload_as
from core.mrkdwn import escape

Payload = Mapping[str, Any]
MAX_LISTED = 3


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


def findings_blocks(raw: Payload) -> list[dict[str, Any]]:
    """A header section, one section per finding with a button to its query, and a context
    line with the similar cases and runbooks."""
    payload = payload_as(FindingsPayload, raw)
    blocks: list[dict[str, Any]] = [_section(f"*{_headline(payload)}*")]
    for finding in (payload.get("findings") or [])[:MAX_LISTED]:
        block = _section(f"{escape(finding.get('summary'))}\n"
                         f"_confidence {float(finding.get('confidence', 0)):.0%}_")
        link = str(finding.get("link") or "")
        if link.startswith(("http://", "https://")):
            block["accessory"] = {"type": "button", "url": link[:3000],
                                  "text": {"type": "plain_text", "text": "Query"},
                                  "action_id": f"finding_link_{finding.get('metric')}"[:255]}
        blocks.append(block)
    context = [*(f"Similar: {_similar(c)}" for c in payload.get("similar_cases") or []),
               *(f"Runbook: {escape(r.get('title'))}" for r in payload.get("runbooks") or [])]
    if context:
        blocks.append({"type": "context",
                       "elements": [{"type": "mrkdwn", "text": line[:3000]}
                                    for line in context[:10]]})
    return blocks


def _headline(payload: FindingsPayload) -> str:
    findings = payload.get("findings") or []
    checked = escape(", ".join(payload.get("checked") or []) or "no metric")
    if not findings:
        return f"Analysis: no significant change in {checked}"
    return f"Analysis: {len(findings)} finding(s) in {checked}"


def _similar(case: Mapping[str, Any]) -> str:
    return (f"{escape(case.get('title'))} "
            f"(resolved by {escape(case.get('resolved_by') or 'its plan')})")


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}
