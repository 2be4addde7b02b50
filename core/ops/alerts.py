"""Alert intake (the seed's Sensor): Prometheus Alertmanager's webhook notifications (version 4)
become cases and notes, one open case per alert group (its ``groupKey``), whatever the order and
number of its notifications.

- The first alerts seen firing open the group's case (idempotent open, keyed by the group and
  its recurrence) and are noted on it with their evidence (``alert_firing``).
- An alert (fingerprint + startsAt) not seen before, in a group whose case is open, is one
  ``alert_new`` note; a repeat is nothing.
- A group that fires a new alert after its case CLOSED opens its next case, noted as
  ``alert_recurrence`` naming the previous case; old alerts repeated or reordered open nothing.
- Each resolved alert is one ``alert_resolved`` note on the case it belongs to. A resolution of
  an alert never seen firing, while the group has no open case, waits for the group's next case.

Every note carries ``evt.alert.noted.v1`` (one line in the case's thread, ``alert_render``) and
writes the alert's labels, annotations and graph link as ``evidence_link`` rows in its own
transaction. The bookkeeping is ``alert_store``'s. What alerts say is read cleaned and cut to
each field's budget (``alert_text``), never refused: Alertmanager does not send a refused
notification again.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Engine

from core.cases.service import CaseService
from core.domain.commands import NoteCase, OpenCase
from core.domain.messages import (
    AlertGroupFacts,
    AlertResolvedFacts,
    AlertSaid,
    AlertSeenFacts,
    AlertsOpeningFacts,
    Topic,
)
from core.ops import alert_store
from core.ops.alert_store import OPENED, GroupOutcome, Seen, Sighting
from core.ops.alert_text import cut, shortened, storable
from core.tracing import current

log = logging.getLogger(__name__)

ACTOR = "alertmanager"
TITLE_MAX = 200
# Characters kept of each text (more is cut, with a marker): evidence keeps a label value or an
# annotation up to these; a note's line says an alert's summary in at most SAID_MAX.
LABEL_MAX = 2_000
ANNOTATION_MAX = 8_000
URL_MAX = 8_000  # a longer generatorURL is not kept as a link (a cut link leads nowhere)
GROUP_KEY_MAX = 4_096  # as stored; the group is known by the digest of the whole key
RECEIVER_MAX = 200
SAID_MAX = 500
LISTED_MAX = 20  # alerts an opening note names (its evidence keeps them all)
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


def _within(limit: int) -> AfterValidator:
    """Text kept as stored: storable, cut to ``limit`` characters (``alert_text.cut``)."""
    return AfterValidator(lambda text: cut(text, limit))


# What an alert says is stored cut and cleaned, never refused (no alert is lost at the door);
# only the fields that identify an alert must be as Alertmanager sends them.
Storable = Annotated[str, AfterValidator(storable)]
LabelText = Annotated[str, _within(LABEL_MAX)]
AnnotationText = Annotated[str, _within(ANNOTATION_MAX)]


class Alert(_Lenient):
    """One alert of a notification (field names are Alertmanager's own)."""

    status: Literal["firing", "resolved"]
    labels: dict[LabelText, LabelText] = Field(default_factory=dict)
    annotations: dict[LabelText, AnnotationText] = Field(default_factory=dict)
    startsAt: Storable = Field(default="", max_length=64)
    endsAt: Storable = Field(default="", max_length=64)
    generatorURL: Storable = ""
    fingerprint: Storable = ""


class Notification(_Lenient):
    """One webhook notification: the current state of one alert group. Its number of alerts is
    bounded by the API's body limit for this endpoint (``core.api.alerts``)."""

    version: Literal["4"]
    groupKey: Storable = Field(min_length=1)
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: Annotated[str, _within(RECEIVER_MAX)] = ""
    groupLabels: dict[LabelText, LabelText] = Field(default_factory=dict)
    commonLabels: dict[LabelText, LabelText] = Field(default_factory=dict)
    commonAnnotations: dict[LabelText, AnnotationText] = Field(default_factory=dict)
    externalURL: Storable = ""
    alerts: list[Alert] = Field(default_factory=list)


@dataclass
class Intake:
    """What one notification did: the group, the case its alerts belong to (and its
    recurrence), whether this notification opened a case, and the notes it wrote or left
    pending."""

    group: str
    case_id: str | None = None
    recurrence: int | None = None
    opened: bool = False
    new_alerts: int = 0
    resolved_noted: int = 0
    resolved_pending: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "case_id": self.case_id, "recurrence": self.recurrence,
                "opened": self.opened, "new_alerts": self.new_alerts,
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
    return shortened(title, TITLE_MAX)


def severity_of(note: Notification) -> str:
    labels = {**note.groupLabels, **note.commonLabels}
    return SEVERITIES.get(labels.get("severity", "").lower(), DEFAULT_SEVERITY)


def without_credentials(url: str) -> str:
    """An http(s) link as it may be stored and shown: any ``user:pass@`` removed; "" for
    anything else."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return ""
    if parts.scheme not in ("http", "https") or not parts.netloc or len(url) > URL_MAX:
        return ""
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def sightings_of(note: Notification, title: str) -> list[Sighting]:
    """The notification's alerts as the intake keeps them. A resolved notification without
    alerts stands for the whole group."""
    if note.status == "resolved" and not note.alerts:
        whole = {"labels": {"alertname": title}, "url": "",
                 "annotations": {"summary": "the alert group resolved"}}
        return [Sighting("group", "", firing=False, ends_at="", alert=whole)]
    return [Sighting(_fingerprint(a), a.startsAt, firing=a.status == "firing",
                     ends_at=None if a.status == "firing" else a.endsAt,
                     alert={"labels": a.labels, "annotations": a.annotations,
                            "url": without_credentials(a.generatorURL)})
            for a in note.alerts]


def _fingerprint(alert: Alert) -> str:
    """Alertmanager's fingerprint (16 hex digits); a digest of it when longer than the column,
    of the labels when missing."""
    if not alert.fingerprint:
        return hashlib.sha256(repr(sorted(alert.labels.items())).encode()).hexdigest()[:16]
    if len(alert.fingerprint) > 64:
        return hashlib.sha256(alert.fingerprint.encode()).hexdigest()
    return alert.fingerprint


class AlertIntake:
    """Turns notifications into cases and notes through the case service."""

    def __init__(self, engine: Engine, cases: CaseService) -> None:
        self.engine = engine
        self.cases = cases

    def receive(self, note: Notification) -> Intake:
        digest = group_digest(note.groupKey)
        claim = {"group_key_hash": digest, "group_key": cut(note.groupKey, GROUP_KEY_MAX),
                 "receiver": note.receiver, "title": title_of(note),
                 "severity": severity_of(note)}
        sightings = sightings_of(note, claim["title"])
        outcome = alert_store.record_notification(self.engine, claim, sightings)
        settling = _Settling(self.engine, self.cases, outcome, Intake(group=digest[:16]))
        settling.write()
        return settling.intake


class _Settling:
    """Writes what a notification's outcome calls for: each recurrence's case, then its notes,
    each note marking its rows. Rows another delivery left unwritten are finished here too; two
    deliveries writing the same note meet on its idempotency key."""

    def __init__(self, engine: Engine, cases: CaseService, outcome: GroupOutcome,
                 intake: Intake) -> None:
        self.engine = engine
        self.cases = cases
        self.outcome = outcome
        self.group = outcome.group
        self.intake = intake
        self.case_ids: dict[int, UUID] = {}

    def write(self) -> None:
        rows = [row for row in self.outcome.outstanding if row.recurrence in self.outcome.fired]
        opening: dict[int, list[Seen]] = defaultdict(list)
        for row in rows:
            if row.role == OPENED and not row.noted:
                opening[row.recurrence].append(row)
        for recurrence, members in sorted(opening.items()):
            self._note_opening(recurrence, members)
        for row in rows:
            if row.role == alert_store.NEW and not row.noted:
                self.intake.new_alerts += self._note_new(row)
        for row in rows:
            if row.ends_at is not None and not row.resolved_noted:
                self.intake.resolved_noted += self._note_resolved(row)
        self._tell()

    def _tell(self) -> None:
        """The reply's case: that of the newest recurrence the notification's alerts joined."""
        fired = self.outcome.fired
        joined = [row.recurrence for row in self.outcome.touched if row.recurrence in fired]
        self.intake.resolved_pending = sum(
            1 for row in self.outcome.touched
            if row.recurrence not in fired and row.ends_at is not None)
        if joined:
            self.intake.recurrence = max(joined)
            self.intake.case_id = str(self.case_of(max(joined)))

    # -- cases ------------------------------------------------------------------------------

    def case_of(self, recurrence: int) -> UUID:
        """The case of a recurrence that has fired: known, or opened now (or replayed)."""
        if recurrence in self.case_ids:
            return self.case_ids[recurrence]
        known = self._known_case(recurrence)
        if known is None:
            known = self._open(recurrence)
        self.case_ids[recurrence] = known
        return known

    def _known_case(self, recurrence: int) -> UUID | None:
        group = self.group
        if recurrence == group.recurrence and group.case_id is not None:
            return group.case_id
        if recurrence == group.recurrence - 1 and group.previous_case_id is not None:
            return group.previous_case_id
        rows = [*self.outcome.touched, *self.outcome.outstanding]
        return next((row.case_id for row in rows
                     if row.recurrence == recurrence and row.case_id is not None), None)

    def _open(self, recurrence: int) -> UUID:
        cmd = OpenCase(title=self.group.title, actor=ACTOR, severity=self.group.severity,
                       correlation_id=current())
        digest = self.group.digest
        key = f"alertmanager:{digest}" if recurrence == 1 else f"alertmanager:{digest}:{recurrence}"
        reply = self.cases.open_case(cmd, key)
        case_id = UUID(reply.data()["case_id"])
        alert_store.record_case(self.engine, digest, recurrence, case_id)
        if not reply.replayed:
            self.intake.opened = True
            log.info("alert group %s opened case %s (recurrence %d)", digest[:16], case_id,
                     recurrence)
        return case_id

    # -- notes ------------------------------------------------------------------------------

    def _note_opening(self, recurrence: int, rows: Sequence[Seen]) -> int:
        """The alerts that opened a recurrence's case: one note with their evidence; from the
        second recurrence on it names the previous case."""
        alerts = [_said(row) for row in rows]
        meta: AlertsOpeningFacts = {"group": self.group.digest[:16], "recurrence": recurrence,
                                    "alerts": alerts[:LISTED_MAX], "alert_count": len(alerts)}
        event = "alert_firing"
        reason = "firing: " + "; ".join(_line(a) for a in alerts[:LISTED_MAX])
        if len(alerts) > LISTED_MAX:
            reason += f"; and {len(alerts) - LISTED_MAX} more"
        if recurrence > 1:
            previous = str(self.case_of(recurrence - 1))
            meta["previous_case_id"], meta["title"] = previous, self.group.title
            event = "alert_recurrence"
            reason = f"recurrence {recurrence} of {self.group.title}, previous case {previous}"
        return self._note(recurrence, event, reason, meta, f"opened:{recurrence}",
                          rows, resolved=False)

    def _note_new(self, row: Seen) -> int:
        said = _said(row)
        meta: AlertSeenFacts = {"group": self.group.digest[:16], "recurrence": row.recurrence,
                                **said}
        return self._note(row.recurrence, "alert_new", f"new alert in this group: {_line(said)}",
                          meta, f"new:{_hash(*row.identity)}", [row], resolved=False)

    def _note_resolved(self, row: Seen) -> int:
        said = _said(row)
        meta: AlertResolvedFacts = {"group": self.group.digest[:16],
                                    "recurrence": row.recurrence, **said, "ends_at": row.ends_at}
        reason = _line(said, " resolved")
        return self._note(row.recurrence, "alert_resolved", reason, meta,
                          f"resolved:{_hash(*row.identity, str(row.ends_at))}", [row],
                          resolved=True)

    def _note(self, recurrence: int, event: str, reason: str, meta: AlertGroupFacts,
              key: str, rows: Sequence[Seen], *, resolved: bool) -> int:
        """One note on the recurrence's case, with its rows marked and their evidence written
        in the same transaction: 1 if written now, 0 if it was already."""
        case_id = self.case_of(recurrence)
        digest = self.group.digest
        status = "resolved" if resolved else "firing"

        def evidence(conn: Connection) -> None:
            alert_store.mark_noted(conn, digest, rows, resolved=resolved)
            alert_store.write_evidence(conn, case_id, [_evidence(row, status) for row in rows])

        note = NoteCase(case_id, event, ACTOR, reason=reason, meta=meta,
                        topic=Topic.ALERT_NOTED, correlation_id=current())
        reply = self.cases.note(note, f"alertmanager:{digest[:32]}:{key}", also=evidence)
        reply.data()
        return 0 if reply.replayed else 1


def _said(row: Seen) -> AlertSaid:
    """What a note says of an alert."""
    labels: Mapping[str, str] = row.alert.get("labels") or {}
    annotations: Mapping[str, str] = row.alert.get("annotations") or {}
    return {"fingerprint": row.fingerprint, "starts_at": row.starts_at,
            "alertname": labels.get("alertname", "alert"),
            "summary": shortened(annotations.get("summary") or annotations.get("description")
                                 or "", SAID_MAX),
            "url": row.alert.get("url") or ""}


def _line(said: Mapping[str, Any], verb: str = "") -> str:
    words = f"{said['alertname']}{verb}"
    return f"{words}: {said['summary']}" if said["summary"] else words


def _evidence(row: Seen, status: str) -> dict[str, Any]:
    said = _said(row)
    data = {"source": "alertmanager", "status": status, "metric": said["alertname"],
            "summary": _line(said, f" {status}"), "link": said["url"], "confidence": 1.0,
            "fingerprint": row.fingerprint, "starts_at": row.starts_at,
            "ends_at": row.ends_at if status == "resolved" else None,
            "labels": dict(row.alert.get("labels") or {}),
            "annotations": dict(row.alert.get("annotations") or {})}
    return {"metric": said["alertname"], "summary": data["summary"], "url": said["url"],
            "data": data}


def _hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:32]
