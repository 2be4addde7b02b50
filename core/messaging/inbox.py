"""Consumers' inbox and dead letters: which messages a consumer has already taken effect for,
and which it gave up on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from core.db.tables import dead_letter, inbox
from core.messaging.envelope import Envelope


def seen(conn: Connection, consumer: str, message_id: int) -> bool:
    query = select(inbox.c.message_id).where(inbox.c.consumer == consumer,
                                             inbox.c.message_id == message_id)
    return conn.execute(query).first() is not None


def mark(conn: Connection, consumer: str, message_id: int) -> None:
    """Record that ``consumer`` took effect for ``message_id`` (idempotent)."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(dialect_insert(inbox).values(consumer=consumer, message_id=message_id)
                 .on_conflict_do_nothing())


def bury(conn: Connection, consumer: str, envelope: Envelope, error: str, attempts: int) -> None:
    """Move a poison message to the dead letters (one row per consumer and message: a requeued
    message that dies again is listed again, with its latest error)."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    row = dialect_insert(dead_letter).values(
        consumer=consumer, message_id=envelope.message_id, topic=envelope.topic,
        key=envelope.key, payload=envelope.payload, error=error[:4000], attempts=attempts,
    )
    conn.execute(row.on_conflict_do_update(
        index_elements=[dead_letter.c.consumer, dead_letter.c.message_id],
        set_={"error": row.excluded.error, "attempts": row.excluded.attempts,
              "created_at": func.now(), "requeued_at": None},
    ))
    mark(conn, consumer, envelope.message_id)


def dead_letters(engine: Engine, *, include_requeued: bool = False) -> list[RowMapping]:
    query = select(dead_letter).order_by(dead_letter.c.id)
    if not include_requeued:
        query = query.where(dead_letter.c.requeued_at.is_(None))
    with engine.connect() as conn:
        return list(conn.execute(query).mappings())


def held(conn: Connection, consumer: str, mark: str) -> list[int]:
    """The ids of ``consumer``'s dead letters not yet requeued whose error starts with ``mark``
    (messages held, not given up on)."""
    query = (select(dead_letter.c.id)
             .where(dead_letter.c.consumer == consumer, dead_letter.c.requeued_at.is_(None),
                    dead_letter.c.error.startswith(mark, autoescape=True))
             .order_by(dead_letter.c.message_id))
    return [int(row[0]) for row in conn.execute(query)]


def requeue(conn: Connection, dead_letter_id: int, now: Any) -> Envelope | None:
    """Forget a dead letter's inbox entry so its message can be delivered again."""
    row = conn.execute(select(dead_letter).where(dead_letter.c.id == dead_letter_id)
                       ).mappings().first()
    if row is None:
        return None
    conn.execute(inbox.delete().where(inbox.c.consumer == row["consumer"],
                                      inbox.c.message_id == row["message_id"]))
    conn.execute(update(dead_letter).where(dead_letter.c.id == dead_letter_id)
                 .values(requeued_at=now))
    return Envelope(row["message_id"], row["topic"], row["key"], dict(row["payload"]))



