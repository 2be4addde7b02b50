"""The shapes a case and its timeline have wherever they are read: REST bodies, chat cards, the
agent's and the MCP server's tools. TypedDicts, so they stay the JSON-ready dicts they were."""

from __future__ import annotations

from typing import Any, TypedDict


class CaseView(TypedDict):
    """A case as every reply shows it (``CaseService.get_case``, ``list_cases``)."""

    case_id: str
    tenant: str
    title: str
    severity: str
    status: str
    version: int
    created_at: str  # ISO 8601, UTC
    updated_at: str


class TimelineEntry(TypedDict):
    """One row of a case's timeline (``CaseService.timeline``), oldest first."""

    id: int
    event: str
    actor: str
    reason: str | None
    correlation_id: str | None
    meta: dict[str, Any]  # the move's or note's facts: free-form JSON
    created_at: str  # ISO 8601, UTC
