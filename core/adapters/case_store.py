"""SQL statements of the case service; each takes the open transaction's connection.

Kept apart from the service so the service reads as the transition contract and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from sqlalchemy import Connection, RowMapping, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from core.adapters.tables import (
    case_timeline,
    idempotency,
    ops_case,
    outbox,
    plan_approved,
    plan_proposed,
    session_fence,
)
from core.domain.messages import Message


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every time opsgate stores is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def lock_case(conn: Connection, case_id: UUID) -> RowMapping | None:
    """The case row, locked for this transaction (SQLite: already locked by BEGIN IMMEDIATE)."""
    query = select(ops_case).where(ops_case.c.id == case_id).with_for_update()
    return conn.execute(query).mappings().first()


def read_case(conn: Connection, case_id: UUID) -> RowMapping | None:
    return conn.execute(select(ops_case).where(ops_case.c.id == case_id)).mappings().first()


def insert_case(conn: Connection, row: Mapping[str, Any]) -> None:
    conn.execute(insert(ops_case).values(**row))


def move_case(conn: Connection, case_id: UUID, status: str, version: int, at: datetime) -> None:
    conn.execute(
        update(ops_case)
        .where(ops_case.c.id == case_id)
        .values(status=status, version=version, updated_at=at)
    )


def append_timeline(conn: Connection, row: Mapping[str, Any]) -> None:
    conn.execute(insert(case_timeline).values(**row))


def read_timeline(conn: Connection, case_id: UUID) -> list[RowMapping]:
    query = (
        select(case_timeline).where(case_timeline.c.case_id == case_id).order_by(case_timeline.c.id)
    )
    return list(conn.execute(query).mappings())


def append_outbox(conn: Connection, messages: Iterable[Message]) -> None:
    rows = [{"topic": m.topic, "key": m.key, "payload": m.payload} for m in messages]
    if rows:
        conn.execute(insert(outbox), rows)


def recall_reply(conn: Connection, key: str) -> RowMapping | None:
    return conn.execute(select(idempotency).where(idempotency.c.key == key)).mappings().first()


def record_reply(conn: Connection, key: str, fingerprint: str, status: int, body: str) -> None:
    values = {"key": key, "fingerprint": fingerprint, "status": status, "body": body}
    conn.execute(insert(idempotency).values(**values))


def fence_token(conn: Connection, session_id: str) -> int | None:
    """The highest fence token issued for the session, share-locked so no newer one can be
    issued until this transaction ends."""
    query = select(session_fence.c.token).where(session_fence.c.session_id == session_id)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(read=True)
    token = conn.execute(query).scalar()
    return None if token is None else int(token)


def issue_fence(conn: Connection, session_id: str) -> int:
    """One more than the session's last token (1 for a new session), issued atomically."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    upsert = dialect_insert(session_fence).values(session_id=session_id, token=1)
    statement = upsert.on_conflict_do_update(
        index_elements=[session_fence.c.session_id],
        set_={"token": session_fence.c.token + 1, "updated_at": datetime.now(UTC)},
    ).returning(session_fence.c.token)
    return int(conn.execute(statement).scalar_one())


def latest_plan(conn: Connection, case_id: UUID) -> RowMapping | None:
    query = (
        select(plan_proposed)
        .where(plan_proposed.c.case_id == case_id)
        .order_by(plan_proposed.c.case_version.desc())
        .limit(1)
    )
    return conn.execute(query).mappings().first()


def insert_plan(conn: Connection, case_id: UUID, case_version: int, plan: Mapping[str, Any],
                digest: str, proposed_by: str) -> UUID:
    plan_id = uuid4()
    conn.execute(
        insert(plan_proposed).values(
            id=plan_id, case_id=case_id, case_version=case_version, plan_hash=digest,
            plan=dict(plan), proposed_by=proposed_by,
        )
    )
    return plan_id


def insert_approval(conn: Connection, case_id: UUID, plan_id: UUID, digest: str,
                    decision: Mapping[str, Any]) -> None:
    conn.execute(
        insert(plan_approved).values(
            id=uuid4(), case_id=case_id, plan_id=plan_id, plan_hash=digest,
            decision=dict(decision),
        )
    )


def list_cases(conn: Connection, status: str | None, limit: int) -> list[RowMapping]:
    query = select(ops_case).order_by(ops_case.c.created_at.desc()).limit(limit)
    if status is not None:
        query = query.where(ops_case.c.status == status)
    return list(conn.execute(query).mappings())
