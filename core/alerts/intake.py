"""Alert intake (the seed's Sensor): Prometheus Alertmanager's webhook notifications (version 4)
become cases and notes, one open case per alert group (its ``groupKey``), whatever the order and
number of its notifications.

- The first alerts seen firing open the group's case (idempotent open, keyed by the group and
  its recurrence) and are noted on it with their evidence (``alert_firing``), in the open's
  transaction.
- An alert (fingerprint + startsAt) not seen before, in a group whose case is open, is one
  ``alert_new`` note; a repeat is nothing.
- A group that fires a new alert after its case CLOSED opens its next case, noted as
  ``alert_recurrence`` naming the previous case; old alerts repeated or reordered open nothing.
- Each resolved alert is one ``alert_resolved`` note on the case it belongs to. A resolution of
  an alert never seen firing, while the group has no open case, waits for the group's next case.

Every note carries ``evt.alert.noted.v1`` (one line in the case's thread) and writes the
alert's labels, annotations and graph link as evidence (``core.analysis.store``) in the same
transaction: a first notification commits two (its alerts recorded; the case opened and
noted). The bookkeeping is ``core.alerts.store``'s; what a notification says is read by
``core.alerts.model``.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Engine

from core.alerts import store
from core.alerts.model import (
    GROUP_KEY_MAX,
    LISTED_MAX,
    SAID_MAX,
    Intake,
    Notification,
    group_digest,
    severity_of,
    sightings_of,
    title_of,
)
from core.alerts.store import OPENED, GroupOutcome, Seen
from core.alerts.text import cut, shortened
from core.analysis.store import EvidenceRow, write_evidence
from core.cases.service import CaseService, FirstNote
from core.domain.commands import NoteCase, OpenCase
from core.domain.messages import (
    AlertGroupFacts,
    AlertResolvedFacts,
    AlertSaid,
    AlertSeenFacts,
    AlertsOpeningFacts,
    Topic,
)
from core.tracing import current

log = logging.getLogger(__name__)

ACTOR = "alertmanager"


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
        outcome = store.record_notification(self.engine, claim, sightings)
        settling = _Settling(self.cases, outcome, Intake(group=digest[:16]))
        settling.write()
        return settling.intake


class _Settling:
    """Writes what a notification's outcome calls for: each recurrence's case, then its notes,
    each note marking its rows. Rows another delivery left unwritten are finished here too; two
    deliveries writing the same note meet on its idempotency key."""

    def __init__(self, cases: CaseService, outcome: GroupOutcome, intake: Intake) -> None:
        self.cases = cases
        self.outcome = outcome
        self.group = outcome.group
        self.intake = intake
        self.case_ids: dict[int, UUID] = {}
        self.unrecorded: set[int] = set()  # recurrences opened here, not yet named in the group

    def write(self) -> None:
        rows = [row for row in self.outcome.outstanding if row.recurrence in self.outcome.fired]
        opening: dict[int, list[Seen]] = defaultdict(list)
        for row in rows:
            if row.role == OPENED and not row.noted:
                opening[row.recurrence].append(row)
        for recurrence, members in sorted(opening.items()):
            self._note_opening(recurrence, members)
        for row in rows:
            if row.role == store.NEW and not row.noted:
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
        if recurrence not in self.case_ids:
            known = self._known_case(recurrence)
            if known is None:
                self._open(recurrence)
            else:
                self.case_ids[recurrence] = known
        return self.case_ids[recurrence]

    def _known_case(self, recurrence: int) -> UUID | None:
        group = self.group
        if recurrence == group.recurrence and group.case_id is not None:
            return group.case_id
        if recurrence == group.recurrence - 1 and group.previous_case_id is not None:
            return group.previous_case_id
        rows = [*self.outcome.touched, *self.outcome.outstanding]
        return next((row.case_id for row in rows
                     if row.recurrence == recurrence and row.case_id is not None), None)

    def _open(self, recurrence: int, first: FirstNote | None = None) -> bool:
        """Open the recurrence's case, with ``first`` (its first note) in the same transaction:
        whether it was opened now (False: the open, and its note, replayed)."""
        cmd = OpenCase(title=self.group.title, actor=ACTOR, severity=self.group.severity,
                       correlation_id=current(), components=self._components())
        digest = self.group.digest
        key = f"alertmanager:{digest}" if recurrence == 1 else f"alertmanager:{digest}:{recurrence}"
        self.unrecorded.add(recurrence)  # named by its first note, in the note's transaction
        reply = self.cases.open_case(cmd, key, note=first)
        case_id = self.case_ids[recurrence] = UUID(reply.data()["case_id"])
        if reply.replayed:
            return False
        if first is not None:
            self.unrecorded.discard(recurrence)
        self.intake.opened = True
        log.info("alert group %s opened case %s (recurrence %d)", digest[:16], case_id,
                 recurrence)
        return True

    def _components(self) -> tuple[str, ...]:
        """The catalog components the group's alerts name through their ``service``, ``job``
        and ``namespace`` labels (the catalog's Kubernetes annotations)."""
        catalog = self.cases.policy.catalog()
        found: dict[str, None] = {}
        for row in (*self.outcome.touched, *self.outcome.outstanding):
            labels = row.alert.get("labels") or {}
            found.update(dict.fromkeys(c.name for c in catalog.by_labels(labels)))
        return tuple(found)

    # -- notes ------------------------------------------------------------------------------

    def _note_opening(self, recurrence: int, rows: Sequence[Seen]) -> int:
        """The alerts that opened a recurrence's case: one note with their evidence, written
        with the case when it opens now; from the second recurrence on it names the previous
        case."""
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
        key = f"opened:{recurrence}"
        if recurrence not in self.case_ids and self._known_case(recurrence) is None:
            first = FirstNote(self._key(key),
                              lambda case_id: self._cmd(case_id, event, reason, meta),
                              self._rows_of(recurrence, rows, resolved=False))
            if self._open(recurrence, first):
                return 1
        # Known, or its open replayed: the note is written (or replayed) under its own key.
        return self._note(recurrence, event, reason, meta, key, rows, resolved=False)

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
        """One note on the recurrence's case, with its rows (``_rows_of``) in the same
        transaction: 1 if written now, 0 if it was already."""
        case_id = self.case_of(recurrence)
        rows_of_the_note = self._rows_of(recurrence, rows, resolved=resolved)
        reply = self.cases.note(self._cmd(case_id, event, reason, meta), self._key(key),
                                also=lambda conn: rows_of_the_note(conn, case_id))
        reply.data()
        if not reply.replayed:
            self.unrecorded.discard(recurrence)
        return 0 if reply.replayed else 1

    def _cmd(self, case_id: UUID, event: str, reason: str, meta: AlertGroupFacts) -> NoteCase:
        return NoteCase(case_id, event, ACTOR, reason=reason, meta=meta,
                        topic=Topic.ALERT_NOTED, correlation_id=current())

    def _key(self, key: str) -> str:
        return f"alertmanager:{self.group.digest[:32]}:{key}"

    def _rows_of(self, recurrence: int, rows: Sequence[Seen], *,
                 resolved: bool) -> Callable[[Connection, UUID], None]:
        """A note's own rows, written with it: its alerts marked, their evidence and (a case
        opened here) the case named in the group."""
        digest = self.group.digest
        status = "resolved" if resolved else "firing"

        def write(conn: Connection, case_id: UUID) -> None:
            if recurrence in self.unrecorded:
                store.record_case(conn, digest, recurrence, case_id)
            store.mark_noted(conn, digest, rows, resolved=resolved)
            write_evidence(conn, case_id, "alert", [_evidence(row, status) for row in rows])

        return write


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


def _evidence(row: Seen, status: str) -> EvidenceRow:
    said = _said(row)
    data = {"source": "alertmanager", "status": status, "metric": said["alertname"],
            "summary": _line(said, f" {status}"), "link": said["url"], "confidence": 1.0,
            "fingerprint": row.fingerprint, "starts_at": row.starts_at,
            "ends_at": row.ends_at if status == "resolved" else None,
            "labels": dict(row.alert.get("labels") or {}),
            "annotations": dict(row.alert.get("annotations") or {})}
    return {"metric": said["alertname"][:200], "summary": str(data["summary"]),
            "url": said["url"] or None, "data": data}


def _hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:32]
