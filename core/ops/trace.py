"""``opsgate trace <correlation-id>``: every hop one correlation id made, in order: the case
timeline rows written under it, the outbox messages those writes emitted, the consumers that
took each message (inbox receipts, dead letters), and the gateway calls made on its behalf.

Rows the database stamps itself (outbox, inbox) are placed by the timeline row they were written
with, or never before the message they follow: SQLite stamps them to the second only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select

from core.cases.timeline import entry_of
from core.db.case_store import as_utc
from core.db.tables import case_timeline, dead_letter, inbox, tool_call_ledger
from core.domain.messages import Topic
from core.messaging import outbox

_RANK = {"timeline": 0, "outbox": 1, "ledger": 2, "inbox": 3, "dead": 3}


@dataclass(frozen=True)
class Hop:
    """One step of the path: when, what kind, and its facts."""

    when: datetime
    kind: str  # timeline | outbox | inbox | dead | ledger
    order: int
    facts: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.when.isoformat(timespec='milliseconds')}  {self.kind:<8}  {_describe(self)}"

    def as_dict(self) -> dict[str, Any]:
        return {"when": self.when.isoformat(), "kind": self.kind, **self.facts}


def trace(engine: Engine, correlation_id: str) -> list[Hop]:
    """The hops of ``correlation_id``, oldest first; empty when nothing carries it."""
    with engine.connect() as conn:
        timeline = list(conn.execute(
            select(case_timeline).where(case_timeline.c.correlation_id == correlation_id)
            .order_by(case_timeline.c.id)).mappings())
        messages = outbox.with_correlation(conn, correlation_id)
        ids = [row["id"] for row in messages]
        receipts = list(conn.execute(select(inbox).where(inbox.c.message_id.in_(ids))
                                     ).mappings()) if ids else []
        dead = list(conn.execute(select(dead_letter).where(dead_letter.c.message_id.in_(ids))
                                 ).mappings()) if ids else []
        calls = list(conn.execute(
            select(tool_call_ledger).where(tool_call_ledger.c.correlation_id == correlation_id)
            ).mappings())
    hops = [_timeline_hop(row) for row in timeline]
    written = _write_times(timeline)
    sent: dict[int, datetime] = {}
    for row in messages:
        hop = _message_hop(row, written)
        sent[row["id"]] = hop.when
        hops.append(hop)
    hops += [_receipt_hop(row, sent) for row in receipts]
    hops += [_dead_hop(row, sent) for row in dead]
    hops += [_call_hop(row) for row in calls]
    return sorted(hops, key=lambda hop: (hop.when, _RANK[hop.kind], hop.order))


def _write_times(timeline: Sequence[Mapping[Any, Any]]) -> dict[tuple[str, int, str], datetime]:
    """When each (case, version, event) was written: the outbox rows of that write share it."""
    times: dict[tuple[str, int, str], datetime] = {}
    for row in timeline:
        entry = entry_of(row)
        times.setdefault((str(row["case_id"]), entry.version or 0, entry.event),
                         as_utc(row["created_at"]))
    return times


def _timeline_hop(row: Mapping[Any, Any]) -> Hop:
    entry = entry_of(row)
    return Hop(as_utc(row["created_at"]), "timeline", entry.id, {
        "case_id": str(row["case_id"]), "event": entry.event, "actor": entry.actor,
        "outcome": entry.outcome, "from": entry.source, "to": entry.target,
        "version": entry.version, "reason": entry.reason})


def _message_hop(row: Mapping[Any, Any], written: dict[tuple[str, int, str], datetime]) -> Hop:
    payload = dict(row["payload"])
    key = (str(payload.get("case_id")), int(payload.get("version") or 0),
           str(payload.get("event") or ("case_opened" if row["topic"] == Topic.CASE_OPENED
                                        else "")))
    when = written.get(key, as_utc(row["created_at"]))
    published = row["published_at"]
    return Hop(when, "outbox", int(row["id"]), {
        "message_id": int(row["id"]), "topic": row["topic"], "case_id": row["key"],
        "published_at": None if published is None else as_utc(published).isoformat()})


def _receipt_hop(row: Mapping[Any, Any], sent: dict[int, datetime]) -> Hop:
    when = max(as_utc(row["processed_at"]), sent[int(row["message_id"])])
    return Hop(when, "inbox", int(row["message_id"]), {
        "message_id": int(row["message_id"]), "consumer": row["consumer"]})


def _dead_hop(row: Mapping[Any, Any], sent: dict[int, datetime]) -> Hop:
    when = max(as_utc(row["created_at"]), sent[int(row["message_id"])])
    return Hop(when, "dead", int(row["message_id"]), {
        "message_id": int(row["message_id"]), "consumer": row["consumer"],
        "error": str(row["error"])[:200], "requeued": row["requeued_at"] is not None})


def _call_hop(row: Mapping[Any, Any]) -> Hop:
    when = as_utc(row["started_at"] or row["created_at"])
    return Hop(when, "ledger", 0, {
        "tool": row["tool"], "actor": row["actor"], "session_id": row["session_id"],
        "state": row["state"], "attempts": int(row["attempts"]), "key": row["key"]})


def _describe(hop: Hop) -> str:
    f = hop.facts
    if hop.kind == "timeline":
        move = (f"{f['from']} -> {f['to']}" if f["outcome"] in ("accepted", "opened")
                else f"({f['outcome']})")
        reason = f" — {f['reason']}" if f.get("reason") else ""
        return (f"case {f['case_id'][:8]} v{f['version']} {f['event']} {move} "
                f"by {f['actor']}{reason}")
    if hop.kind == "outbox":
        state = "published" if f["published_at"] else "NOT published"
        return f"message #{f['message_id']} {f['topic']} ({state})"
    if hop.kind == "inbox":
        return f"message #{f['message_id']} handled by {f['consumer']}"
    if hop.kind == "dead":
        again = ", requeued" if f["requeued"] else ""
        return f"message #{f['message_id']} DEAD at {f['consumer']}{again}: {f['error']}"
    return (f"gateway {f['tool']} by {f['actor']} ({f['session_id']}): {f['state']}, "
            f"attempts {f['attempts']}")


def summary(hops: list[Hop]) -> str:
    counts = {kind: sum(1 for h in hops if h.kind == kind) for kind in _RANK}
    cases = sorted({str(h.facts["case_id"])[:8] for h in hops if "case_id" in h.facts})
    return (f"{counts['timeline']} timeline rows, {counts['outbox']} outbox messages, "
            f"{counts['inbox']} inbox receipts, {counts['dead']} dead letters, "
            f"{counts['ledger']} gateway calls; cases {', '.join(cases) or '-'}")
