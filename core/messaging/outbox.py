"""The outbox table's reads and marks: which rows are due (``deliver_after``), the relay's claim and
mark, the lag readiness and reconcile measure, a requeued message's reset, a trace's messages.

The service's INSERT of a request's messages stays in ``core.db.case_store.write``: it is one
statement with the case, timeline and reply rows of the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Connection, Engine, RowMapping, func, or_, select, update

from core.clock import utcnow
from core.db.case_store import as_utc
from core.db.tables import outbox
from core.messaging.envelope import Envelope

Claimed = list[tuple[Envelope, int]]
"""Claimed rows, each with its ``attempts`` as read (``mark`` compares it)."""


def due(now: datetime) -> ColumnElement[bool]:
    """Unpublished outbox rows the relay may hand out at ``now``: not scheduled, or due. ``now``
    is bound in UTC (SQLite stores a datetime's wall time and drops its zone)."""
    return (outbox.c.published_at.is_(None)
            & or_(outbox.c.deliver_after.is_(None),
                  outbox.c.deliver_after <= now.astimezone(UTC)))


# -- what the relay has in hand ---------------------------------------------------------------


def unpublished(engine: Engine, now: datetime | None = None) -> int:
    """Due outbox rows not yet handed to the bus (by any relay): the relay's work in hand. Rows
    scheduled for later (a verification's next reading) are not counted until due."""
    with engine.connect() as conn:
        query = select(func.count()).select_from(outbox).where(due(now or utcnow()))
        return int(conn.execute(query).scalar_one())


def oldest_unpublished(engine: Engine, now: datetime) -> tuple[datetime | None, int]:
    """Since when the oldest due unpublished outbox row could have been published (written, or
    its ``deliver_after``), and how many due rows wait."""
    since = func.coalesce(outbox.c.deliver_after, outbox.c.created_at)
    query = select(func.min(since), func.count()).where(due(now))
    with engine.connect() as conn:
        oldest, waiting = conn.execute(query).one()
    return (None if oldest is None else as_utc(oldest)), int(waiting)


def soonest_scheduled(engine: Engine, now: datetime) -> datetime | None:
    """When the first unpublished row scheduled after ``now`` falls due; None when none is."""
    query = (select(func.min(outbox.c.deliver_after))
             .where(outbox.c.published_at.is_(None),
                    outbox.c.deliver_after > now.astimezone(UTC)))
    with engine.connect() as conn:
        soonest = conn.execute(query).scalar()
    return None if soonest is None else as_utc(soonest)


def stale(engine: Engine, cutoff: datetime, limit: int = 1000) -> list[RowMapping]:
    """Rows unpublished since before ``cutoff`` (id, topic, key, since). A scheduled row (a
    verification's next reading) is late only from its delivery time."""
    since = func.coalesce(outbox.c.deliver_after, outbox.c.created_at)
    query = (select(outbox.c.id, outbox.c.topic, outbox.c.key, since.label("since"))
             .where(outbox.c.published_at.is_(None), since < cutoff.astimezone(UTC))
             .order_by(outbox.c.id).limit(limit))
    with engine.connect() as conn:
        return list(conn.execute(query).mappings())


def still_unpublished(engine: Engine, ids: Sequence[int]) -> set[int]:
    """Which of ``ids`` are still unpublished."""
    query = select(outbox.c.id).where(outbox.c.id.in_(ids), outbox.c.published_at.is_(None))
    with engine.connect() as conn:
        return {int(row[0]) for row in conn.execute(query)}


# -- the relay's claim and mark ---------------------------------------------------------------


def claim(conn: Connection, now: datetime, limit: int) -> Claimed:
    """The first ``limit`` rows due at ``now``, in id order, each with its ``attempts``."""
    query = (select(outbox.c.id, outbox.c.topic, outbox.c.key, outbox.c.payload,
                    outbox.c.attempts)
             .where(due(now))
             .order_by(outbox.c.id)
             .limit(limit))
    return [(Envelope(row.id, row.topic, row.key, dict(row.payload), row.attempts + 1),
             row.attempts) for row in conn.execute(query)]


def claim_and_mark(conn: Connection, now: datetime, limit: int) -> list[Envelope]:
    """PostgreSQL: claim and mark in one statement (one round trip, not two) whose subselect
    skips rows another relay holds; the caller's commit makes the marks stand."""
    claimable = (select(outbox.c.id)
                 .where(due(now))
                 .order_by(outbox.c.id)
                 .limit(limit)
                 .with_for_update(skip_locked=True))
    marked = conn.execute(
        update(outbox)
        .where(outbox.c.id.in_(claimable))
        .values(published_at=datetime.now(UTC), attempts=outbox.c.attempts + 1)
        .returning(outbox.c.id, outbox.c.topic, outbox.c.key, outbox.c.payload,
                   outbox.c.attempts)
    )
    # RETURNING has no order: the bus gets the batch in id (commit) order.
    return sorted((Envelope(row.id, row.topic, row.key, dict(row.payload), row.attempts)
                   for row in marked.all()), key=lambda envelope: envelope.message_id)


def mark(conn: Connection, claimed: Claimed) -> None:
    """Mark the claimed rows published, unless a row was handed out again meanwhile (a dead
    letter requeued while its first delivery ran bumps ``attempts``): that one stays
    unpublished, so the requeue is not lost."""
    for attempts in {seen for _envelope, seen in claimed}:
        conn.execute(
            update(outbox)
            .where(outbox.c.id.in_([e.message_id for e, seen in claimed if seen == attempts]))
            .where(outbox.c.published_at.is_(None), outbox.c.attempts == attempts)
            .values(published_at=datetime.now(UTC), attempts=outbox.c.attempts + 1)
        )


def mark_unpublished(conn: Connection, message_id: int) -> bool:
    """Hand row ``message_id`` to the next relay again; False when the row is gone."""
    # attempts + 1: a relay still publishing the row's last delivery must not mark it
    # published over this (``mark`` compares attempts).
    reset = conn.execute(update(outbox).where(outbox.c.id == message_id)
                         .values(published_at=None, attempts=outbox.c.attempts + 1))
    return reset.rowcount > 0


# -- reading ----------------------------------------------------------------------------------


def with_correlation(conn: Connection, correlation_id: str) -> list[RowMapping]:
    """Every row whose payload carries ``correlation_id``, in id order."""
    query = (select(outbox)
             .where(outbox.c.payload["correlation_id"].as_string() == correlation_id)
             .order_by(outbox.c.id))
    return list(conn.execute(query).mappings())
