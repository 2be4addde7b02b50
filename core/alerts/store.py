"""The alert groups' bookkeeping: ``alert_group`` (one row per Alertmanager group: its current
recurrence and case) and ``alert_seen`` (each alert of a group once, by fingerprint + startsAt:
the recurrence it belongs to, whether it opened that recurrence, which of its notes are written).

What a notification changes is settled in one transaction (``record_notification``) with the
group row locked (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite serialises writers): an alert
not seen before joins the group's current case, or, when that case is CLOSED, opens the next
recurrence. The intake then writes the cases and notes the rows call for; each note marks its
rows (``mark_noted``), and an opening note names its case (``record_case``), in the note's own
transaction (an opening note's is its case's open), so a row still unmarked is work a later
delivery finishes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Engine, and_, bindparam, func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from core.alerts.model import Sighting
from core.db.database import transaction
from core.db.tables import alert_group, alert_seen, ops_case
from core.domain.fsm import CaseStatus

OPENED, NEW, RESOLVED = "opened", "new", "resolved"  # alert_seen.role
Identity = tuple[str, str]  # fingerprint, startsAt


@dataclass(frozen=True)
class Group:
    digest: str
    title: str
    severity: str
    recurrence: int
    case_id: UUID | None
    previous_case_id: UUID | None


@dataclass(frozen=True)
class Seen:
    """One ``alert_seen`` row."""

    fingerprint: str
    starts_at: str
    recurrence: int
    role: str
    case_id: UUID | None
    alert: Mapping[str, Any]
    ends_at: str | None
    noted: bool
    resolved_noted: bool

    @property
    def identity(self) -> Identity:
        return self.fingerprint, self.starts_at

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> Seen:
        return cls(str(row["fingerprint"]), str(row["starts_at"]), int(row["recurrence"]),
                   str(row["role"]), row["case_id"], dict(row["alert"]), row["ends_at"],
                   row["noted_at"] is not None, row["resolved_noted_at"] is not None)


@dataclass(frozen=True)
class GroupOutcome:
    """What the group looks like after a notification: the rows with a note still to write,
    the recurrences that have a case (or are opening one), and the notification's own rows."""

    group: Group
    outstanding: list[Seen]
    fired: frozenset[int]
    touched: list[Seen]


def record_notification(engine: Engine, claim: Mapping[str, Any],
                        sightings: Sequence[Sighting]) -> GroupOutcome:
    """Record one notification's alerts under the group's lock; the group row is inserted by
    the first notification that sees the group (``claim``: its columns)."""
    digest = str(claim["group_key_hash"])
    with transaction(engine, "the alert groups") as conn:
        dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        conn.execute(dialect_insert(alert_group).values(**claim, pending=[])
                     .on_conflict_do_nothing(index_elements=[alert_group.c.group_key_hash]))
        deciding = _Deciding(conn, _group(conn, digest))
        deciding.load({s.fingerprint for s in sightings})
        deciding.fire([s for s in sightings if s.firing])
        for sighting in sightings:
            if not sighting.firing:
                deciding.resolve(sighting)
        deciding.write()
        touched = {s.identity for s in sightings}
        return GroupOutcome(deciding.group, _outstanding(conn, digest),
                            frozenset(_fired(conn, digest)),
                            [row for key, row in deciding.known.items() if key in touched])


def record_case(conn: Connection, digest: str, recurrence: int, case_id: UUID) -> None:
    """In the opening note's transaction (the case's open): the group and its alerts of that
    recurrence name the case opened for it."""
    conn.execute(update(alert_group)
                 .where(alert_group.c.group_key_hash == digest,
                        alert_group.c.recurrence == recurrence,
                        alert_group.c.case_id.is_(None))
                 .values(case_id=case_id))
    conn.execute(update(alert_seen)
                 .where(alert_seen.c.group_key_hash == digest,
                        alert_seen.c.recurrence == recurrence,
                        alert_seen.c.case_id.is_(None))
                 .values(case_id=case_id))


def mark_noted(conn: Connection, digest: str, rows: Iterable[Seen], *, resolved: bool) -> None:
    """In the note's transaction: these rows' firing (or resolution) note is written."""
    column = "resolved_noted_at" if resolved else "noted_at"
    marks = [_key(digest, row) for row in rows]
    if marks:
        conn.execute(_ALERT_ROW.values({column: func.now()}), marks)


# One alert's row, for statements run once per many rows (``_key`` gives the parameters).
_ALERT_ROW = update(alert_seen).where(alert_seen.c.group_key_hash == bindparam("b_group"),
                                      alert_seen.c.fingerprint == bindparam("b_fingerprint"),
                                      alert_seen.c.starts_at == bindparam("b_starts_at"))


def _key(digest: str, row: Seen, **values: Any) -> dict[str, Any]:
    return {"b_group": digest, "b_fingerprint": row.fingerprint, "b_starts_at": row.starts_at,
            **values}


class _Deciding:
    """One notification's decisions, inside the transaction that holds the group's lock. Rows
    are written together (``write``): a group of thousands of alerts is a few statements."""

    def __init__(self, conn: Connection, group: Group) -> None:
        self.conn = conn
        self.group = group
        self.closed = group.case_id is not None and conn.execute(
            select(ops_case.c.status).where(ops_case.c.id == group.case_id)
        ).scalar_one() == CaseStatus.CLOSED
        self.fired_before = _fired(conn, group.digest)
        self.known: dict[Identity, Seen] = {}
        self._inserts: list[dict[str, Any]] = []
        self._roles: list[dict[str, Any]] = []
        self._ends: list[dict[str, Any]] = []

    def load(self, fingerprints: set[str]) -> None:
        query = select(alert_seen).where(alert_seen.c.group_key_hash == self.group.digest,
                                         alert_seen.c.fingerprint.in_(sorted(fingerprints)))
        for row in self.conn.execute(query).mappings():
            seen = Seen.of(row)
            self.known[seen.identity] = seen

    def fire(self, sightings: Sequence[Sighting]) -> None:
        """Alerts firing: those seen firing before are nothing; the others join their
        recurrence, the first of which open it. When one would open the next recurrence (the
        group's case is CLOSED), the group moves on before any alert row is written."""
        unique = {s.identity: (s, self.known.get(s.identity)) for s in sightings}
        fresh = [(s, row) for s, row in unique.values() if row is None or row.role == RESOLVED]
        recurrences = [self._recurrence_for_unseen() if row is None else row.recurrence
                       for _, row in fresh]
        if any(r > self.group.recurrence for r in recurrences):
            self._next_recurrence()
        for sighting, row in fresh:
            if row is None:
                recurrence = self.group.recurrence
                self._insert(sighting, recurrence, self._role_in(recurrence))
            else:
                role = self._role_in(row.recurrence)
                self._roles.append(_key(self.group.digest, row, b_role=role))
                self.known[row.identity] = replace(row, role=role)

    def _role_in(self, recurrence: int) -> str:
        return NEW if recurrence in self.fired_before else OPENED

    def resolve(self, sighting: Sighting) -> None:
        """An alert resolved: noted on its recurrence's case; one never seen firing belongs to
        the current case, or waits for the next one while the group's case is CLOSED."""
        row = self.known.get(sighting.identity)
        if row is None:
            self._insert(sighting, self._recurrence_for_unseen(), RESOLVED)
        elif row.ends_at is None:
            self._ends.append(_key(self.group.digest, row, b_ends_at=sighting.ends_at))
            self.known[row.identity] = replace(row, ends_at=sighting.ends_at)

    def write(self) -> None:
        """The rows decided: new ones first, then changes (which may be to a new one)."""
        if self._inserts:
            self.conn.execute(insert(alert_seen), self._inserts)
        if self._roles:
            self.conn.execute(_ALERT_ROW.values(role=bindparam("b_role")), self._roles)
        if self._ends:
            self.conn.execute(_ALERT_ROW.values(ends_at=bindparam("b_ends_at")), self._ends)
        self._inserts, self._roles, self._ends = [], [], []

    def _recurrence_for_unseen(self) -> int:
        return self.group.recurrence + 1 if self.closed else self.group.recurrence

    def _next_recurrence(self) -> None:
        group = self.group
        self.conn.execute(update(alert_group).where(alert_group.c.group_key_hash == group.digest)
                          .values(recurrence=group.recurrence + 1,
                                  previous_case_id=group.case_id, case_id=None))
        self.group = replace(group, recurrence=group.recurrence + 1,
                             previous_case_id=group.case_id, case_id=None)
        self.closed = False

    def _insert(self, sighting: Sighting, recurrence: int, role: str) -> None:
        case_id = self.group.case_id if recurrence == self.group.recurrence else None
        ends_at = None if sighting.firing else sighting.ends_at
        values = {"group_key_hash": self.group.digest, "fingerprint": sighting.fingerprint,
                  "starts_at": sighting.starts_at, "recurrence": recurrence, "role": role,
                  "case_id": case_id, "alert": sighting.alert,
                  "ends_at": ends_at}
        self._inserts.append(values)
        self.known[sighting.identity] = Seen(
            sighting.fingerprint, sighting.starts_at, recurrence, role, case_id, sighting.alert,
            ends_at, noted=False, resolved_noted=False)


def _group(conn: Connection, digest: str) -> Group:
    row = conn.execute(select(alert_group).where(alert_group.c.group_key_hash == digest)
                       .with_for_update()).mappings().one()
    return Group(digest, str(row["title"]), str(row["severity"]), int(row["recurrence"]),
                 row["case_id"], row["previous_case_id"])


def _fired(conn: Connection, digest: str) -> set[int]:
    """The recurrences that have seen an alert firing: each has (or is opening) its case."""
    query = (select(alert_seen.c.recurrence).distinct()
             .where(alert_seen.c.group_key_hash == digest, alert_seen.c.role != RESOLVED))
    return set(conn.execute(query).scalars())


def _outstanding(conn: Connection, digest: str) -> list[Seen]:
    query = (select(alert_seen)
             .where(alert_seen.c.group_key_hash == digest,
                    or_(and_(alert_seen.c.role != RESOLVED, alert_seen.c.noted_at.is_(None)),
                        and_(alert_seen.c.ends_at.is_not(None),
                             alert_seen.c.resolved_noted_at.is_(None))))
             .order_by(alert_seen.c.recurrence, alert_seen.c.fingerprint,
                       alert_seen.c.starts_at))
    return [Seen.of(row) for row in conn.execute(query).mappings()]
