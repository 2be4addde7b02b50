"""The recorded changes (``change_record``): each change once by its id, found newest first by
the catalog component it resolved to or by the service it was sent for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Engine, false, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from core.changes.model import Change, ChangeIdReused
from core.db.case_store import as_utc
from core.db.database import connection, transaction
from core.db.tables import change_record

MAX_LIMIT = 200


class ChangeStore:
    """Changes on one database (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, change: Change) -> tuple[Change, bool]:
        """Record ``change`` once: ``(change, True)`` the first time; ``(the first one, False)``
        for a retry (same id, same fingerprint); ``ChangeIdReused`` for the same id with other
        content (the first change stands)."""
        row = _row(change)
        with transaction(self.engine, "the change store") as conn:
            dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
            inserted = conn.execute(dialect_insert(change_record).values(**row)
                                    .on_conflict_do_nothing(
                                        index_elements=[change_record.c.change_id])
                                    .returning(change_record.c.id)).first()
            stored = _change(conn.execute(select(change_record).where(
                change_record.c.change_id == change.change_id)).mappings().one())
        if stored.fingerprint != change.fingerprint:
            raise ChangeIdReused(f"change {change.change_id!r} was recorded before with other "
                                 "content; the first one stands (send a new id for a new change)",
                                 change_id=change.change_id)
        return stored, inserted is not None

    def recent(self, components: Sequence[str], services: Sequence[str], since: datetime,
               until: datetime, limit: int = 20) -> list[Change]:
        """Changes of these components or services that happened in ``[since, until]``, newest
        first, at most ``limit`` (1..200). No names: nothing (never every change)."""
        statement = (select(change_record)
                     .where(_of(components, services),
                            change_record.c.happened_at >= _utc(since),
                            change_record.c.happened_at <= _utc(until))
                     .order_by(change_record.c.happened_at.desc(), change_record.c.id.desc())
                     .limit(max(1, min(limit, MAX_LIMIT))))
        with connection(self.engine, "the change store") as conn:
            return [_change(row) for row in conn.execute(statement).mappings()]

    def last_before(self, components: Sequence[str], services: Sequence[str],
                    at: datetime) -> Change | None:
        """The last change of these components or services at or before ``at``; None when
        there is none (or no name is given)."""
        statement = (select(change_record)
                     .where(_of(components, services), change_record.c.happened_at <= _utc(at))
                     .order_by(change_record.c.happened_at.desc(), change_record.c.id.desc())
                     .limit(1))
        with connection(self.engine, "the change store") as conn:
            row = conn.execute(statement).mappings().first()
        return None if row is None else _change(row)


def _of(components: Sequence[str], services: Sequence[str]) -> ColumnElement[bool]:
    wanted = [column.in_(list(names)) for column, names in
              ((change_record.c.component, components), (change_record.c.service, services))
              if names]
    return or_(*wanted) if wanted else false()


def _utc(moment: datetime) -> datetime:
    """UTC, so that SQLite (which keeps no zone) compares like PostgreSQL."""
    return as_utc(moment).astimezone(UTC)


def _row(change: Change) -> dict[str, Any]:
    return {"change_id": change.change_id, "source": change.source, "kind": change.kind,
            "service": change.service, "component": change.component,
            "namespace": change.namespace, "version": change.version,
            "summary": change.summary, "actor": change.actor, "url": change.url,
            "happened_at": _utc(change.happened_at), "received_at": _utc(change.received_at),
            "fingerprint": change.fingerprint, "target": change.target,
            "before": change.before, "after": change.after}


def _change(row: Mapping[Any, Any]) -> Change:
    fields = dict(row)
    del fields["id"]
    fields.update(happened_at=_utc(row["happened_at"]), received_at=_utc(row["received_at"]))
    return Change(**fields)
