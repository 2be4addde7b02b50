"""Alert intake (the seed's Sensor): Prometheus Alertmanager's webhook notifications (version 4)
become cases. Each alert group opens at most one case, through the case service's idempotent
open (business key: the group key), whatever the order and number of its notifications;
resolved alerts become timeline notes on that case.

A group is claimed once in ``alert_group`` with the title and severity of the first
notification seen, so every later open of the group asks for the very same case (a replay).
A resolution that arrives before the group's firing notification waits in the row's
``pending`` list and is noted when the case opens: the end state does not depend on order.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Engine, RowMapping, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from core.adapters.database import transaction
from core.adapters.tables import alert_group
from core.domain.commands import NoteCase, OpenCase
from core.service import CaseService
from core.tracing import current

log = logging.getLogger(__name__)

ACTOR = "alertmanager"
TITLE_MAX = 200
SEVERITIES = {
    "critical": "SEV1", "page": "SEV1", "sev1": "SEV1",
    "error": "SEV2", "high": "SEV2", "major": "SEV2", "sev2": "SEV2",
    "warning": "SEV3", "warn": "SEV3", "minor": "SEV3", "sev3": "SEV3",
    "info": "SEV4", "low": "SEV4", "none": "SEV4", "sev4": "SEV4",
}
DEFAULT_SEVERITY = "SEV3"


class _Lenient(BaseModel):
    # Alertmanager may add fields in later releases: ignored, not refused.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Alert(_Lenient):
    """One alert of a notification (field names are Alertmanager's own)."""

    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str = ""
    endsAt: str = ""
    generatorURL: str = ""
    fingerprint: str = ""


class Notification(_Lenient):
    """One webhook notification: the current state of one alert group."""

    version: Literal["4"]
    groupKey: str = Field(min_length=1, max_length=4096)
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: str = Field(default="", max_length=200)
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[Alert] = Field(default_factory=list, max_length=1000)


@dataclass
class Intake:
    """What one notification did: the group, its case, whether this notification opened it,
    and the resolutions it noted (or left pending)."""

    group: str
    case_id: str | None = None
    opened: bool = False
    resolved_noted: int = 0
    resolved_pending: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "case_id": self.case_id, "opened": self.opened,
                "resolved_noted": self.resolved_noted,
                "resolved_pending": self.resolved_pending}


def group_digest(group_key: str) -> str:
    return hashlib.sha256(group_key.encode("utf-8")).hexdigest()


def title_of(note: Notification) -> str:
    labels = {**note.groupLabels, **note.commonLabels}
    name = labels.get("alertname") or ", ".join(f"{k}={v}" for k, v in
                                                 sorted(note.groupLabels.items()))
    summary = note.commonAnnotations.get("summary") or note.commonAnnotations.get("description")
    if not summary and len(note.alerts) == 1:
        summary = note.alerts[0].annotations.get("summary")
    title = f"{name or 'alert'}: {summary}" if summary else (name or "alert")
    return title[:TITLE_MAX]


def severity_of(note: Notification) -> str:
    labels = {**note.groupLabels, **note.commonLabels}
    return SEVERITIES.get(labels.get("severity", "").lower(), DEFAULT_SEVERITY)


def resolution(alert: Alert) -> dict[str, str]:
    """What a resolved alert's note says; its identity is the fingerprint and end time."""
    name = alert.labels.get("alertname", "alert")
    return {"fingerprint": alert.fingerprint or hashlib.sha256(
                repr(sorted(alert.labels.items())).encode()).hexdigest()[:16],
            "ends_at": alert.endsAt, "alertname": name,
            "summary": alert.annotations.get("summary", "")}


class AlertIntake:
    """Turns notifications into cases and notes through the case service."""

    def __init__(self, engine: Engine, cases: CaseService) -> None:
        self.engine = engine
        self.cases = cases

    def receive(self, note: Notification) -> Intake:
        digest = group_digest(note.groupKey)
        intake = Intake(group=digest[:16])
        row = self._claim(note, digest)
        resolved = [resolution(a) for a in note.alerts if a.status == "resolved"]
        if note.status == "resolved" and not note.alerts:
            resolved = [{"fingerprint": "group", "ends_at": "", "alertname": row["title"],
                         "summary": "the alert group resolved"}]
        case_id = row["case_id"]
        if case_id is None and any(a.status == "firing" for a in note.alerts):
            case_id, intake.opened = self._open(row, digest)
        if case_id is None:
            case_id = self._hold(digest, resolved)
            intake.resolved_pending = 0 if case_id is not None else len(resolved)
            if case_id is None:
                return intake
        intake.case_id = str(case_id)
        for item in resolved:
            intake.resolved_noted += self._note(case_id, digest, item)
        return intake

    # -- the group row ----------------------------------------------------------------------

    def _claim(self, note: Notification, digest: str) -> RowMapping:
        """The group's row, inserted by the first notification that sees the group."""
        with transaction(self.engine, "the alert groups") as conn:
            dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
            conn.execute(dialect_insert(alert_group).values(
                group_key_hash=digest, group_key=note.groupKey, receiver=note.receiver[:200],
                title=title_of(note), severity=severity_of(note), pending=[],
            ).on_conflict_do_nothing(index_elements=[alert_group.c.group_key_hash]))
            return _row(conn, digest)

    def _open(self, row: RowMapping, digest: str) -> tuple[UUID, bool]:
        """Open (or replay the opening of) the group's case, and record it on the row; then
        note the resolutions that arrived before it. Says whether this call opened it."""
        cmd = OpenCase(title=str(row["title"]), actor=ACTOR, severity=str(row["severity"]),
                       correlation_id=current())
        reply = self.cases.open_case(cmd, f"alertmanager:{digest}")
        case_id = UUID(reply.data()["case_id"])
        with transaction(self.engine, "the alert groups") as conn:
            conn.execute(update(alert_group)
                         .where(alert_group.c.group_key_hash == digest,
                                alert_group.c.case_id.is_(None))
                         .values(case_id=case_id))
            pending = list(_row(conn, digest)["pending"])
        if not reply.replayed:
            log.info("alert group %s opened case %s", digest[:16], case_id)
        for item in pending:
            self._note(case_id, digest, item)
        return case_id, not reply.replayed

    def _hold(self, digest: str, resolved: list[dict[str, str]]) -> UUID | None:
        """Keep resolutions of a group whose case is not open yet; the case id when it opened
        meanwhile (the caller then notes them itself)."""
        with transaction(self.engine, "the alert groups") as conn:
            row = _row(conn, digest, lock=True)
            if row["case_id"] is not None:
                return UUID(str(row["case_id"]))
            known = {(p["fingerprint"], p["ends_at"]) for p in row["pending"]}
            fresh = [r for r in resolved if (r["fingerprint"], r["ends_at"]) not in known]
            if fresh:
                conn.execute(update(alert_group).where(alert_group.c.group_key_hash == digest)
                             .values(pending=[*row["pending"], *fresh]))
        return None

    def _note(self, case_id: UUID, digest: str, item: Mapping[str, str]) -> int:
        """One timeline note per resolved alert (fingerprint and end time): 1 if written now."""
        summary = f": {item['summary']}" if item.get("summary") else ""
        note = NoteCase(case_id, "alert_resolved", ACTOR,
                        reason=f"{item['alertname']} resolved{summary}",
                        meta={"fingerprint": item["fingerprint"], "ends_at": item["ends_at"],
                              "group": digest[:16]},
                        correlation_id=current())
        key = f"alertmanager:{digest[:32]}:resolved:{item['fingerprint']}:{item['ends_at']}"
        reply = self.cases.note(note, key[:200])
        reply.data()
        return 0 if reply.replayed else 1


def _row(conn: Connection, digest: str, *, lock: bool = False) -> RowMapping:
    query = select(alert_group).where(alert_group.c.group_key_hash == digest)
    if lock:
        query = query.with_for_update()
    return conn.execute(query).mappings().one()
