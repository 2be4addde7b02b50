"""The rows and views of a case as the service writes and shows them: the one builder of a
timeline row (opened, note, accepted or refused move, a gate decision), and the case and
timeline views every reply and read uses."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypedDict
from uuid import UUID, uuid4

from core.db import case_store as store
from core.domain.views import CaseView, TimelineEntry
from core.tracing import current as current_correlation_id

Outcome = Literal["opened", "note", "accepted", "refused"]


class TimelineRow(TypedDict):
    """One ``case_timeline`` row as the service writes it."""

    case_id: UUID
    event: str
    actor: str
    reason: str | None
    correlation_id: str
    meta: dict[str, Any]  # the move's or note's facts: free-form JSON
    created_at: datetime


def correlation_of(given: str | None) -> str:
    """The correlation id a write records: the caller's, else the one bound to the work in
    hand (the REST request, the message a consumer handles), else a new one."""
    return given or current_correlation_id() or uuid4().hex


def timeline_row(case_id: UUID, event: str, actor: str, reason: str | None,
                 correlation_id: str, at: datetime, *, outcome: Outcome, source: str | None,
                 target: str | None, version: int, facts: Mapping[str, Any] | None = None,
                 context: Mapping[str, Any] | None = None) -> TimelineRow:
    """A timeline row: what came of the request (``outcome``), the status it found (``source``)
    and left (``target``; None when refused), the version it left, its ``facts`` and, when
    given, the caller's ``context``."""
    meta: dict[str, Any] = {"outcome": outcome, "from": source, "to": target,
                            "version": version, **(facts or {})}
    if context:
        meta["context"] = context
    return {"case_id": case_id, "event": event, "actor": actor, "reason": reason,
            "correlation_id": correlation_id, "meta": meta, "created_at": at}


def case_view(row: Mapping[Any, Any]) -> CaseView:
    """A case as every reply shows it (``components`` only when it names some)."""
    view: CaseView = {
        "case_id": str(row["id"]),
        "tenant": row["tenant"],
        "title": row["title"],
        "severity": row["severity"],
        "status": row["status"],
        "version": row["version"],
        "created_at": store.as_utc(row["created_at"]).isoformat(),
        "updated_at": store.as_utc(row["updated_at"]).isoformat(),
    }
    components = case_components(row)
    if components:
        view["components"] = list(components)
    return view


def case_components(row: Mapping[Any, Any]) -> tuple[str, ...]:
    """The catalog components a case row names (none for a case opened before they were)."""
    named = row.get("components") if hasattr(row, "get") else None
    return tuple(str(name) for name in named) if isinstance(named, list) else ()


def timeline_view(row: Mapping[Any, Any]) -> TimelineEntry:
    return {
        "id": row["id"],
        "event": row["event"],
        "actor": row["actor"],
        "reason": row["reason"],
        "correlation_id": row["correlation_id"],
        "meta": row["meta"],
        "created_at": store.as_utc(row["created_at"]).isoformat(),
    }
