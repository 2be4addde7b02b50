"""SQL statements of the case service; each takes the open transaction's connection.

Kept apart from the service so the service reads as the transition contract and nothing else.
The hot path (a transition) is two round trips on PostgreSQL besides BEGIN/COMMIT: one
statement locks the case and reads the idempotency reply, one writes every row (``Writes``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Insert,
    RowMapping,
    String,
    Table,
    Update,
    and_,
    bindparam,
    cast,
    func,
    insert,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from core.db.tables import (
    case_timeline,
    chat_thread,
    idempotency,
    ops_case,
    outbox,
    plan_approved,
    plan_proposed,
    session_fence,
)
from core.domain.messages import Message
from core.domain.views import ApprovalDecision


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every time opsgate stores is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# The hot statements are built once, at import: SQLAlchemy keys and compiles a statement object
# once and then finds it in its compiled cache, where a freshly built one costs a rebuild and a
# re-key on every call.
_LOCK_CASE = select(ops_case).where(ops_case.c.id == bindparam("case_id")).with_for_update()
_RECALL_REPLY = select(idempotency).where(idempotency.c.key == bindparam("key"))
_LOCK_CASE_WITH_REPLY = (
    select(
        ops_case,
        idempotency.c.fingerprint.label("reply_fingerprint"),
        idempotency.c.outcome.label("reply_outcome"),
        idempotency.c.body.label("reply_body"),
    )
    .select_from(ops_case.outerjoin(idempotency, idempotency.c.key == bindparam("key")))
    .where(ops_case.c.id == bindparam("case_id"))
    .with_for_update(of=ops_case)
)
_LATEST_PLAN = (
    select(plan_proposed)
    .where(plan_proposed.c.case_id == bindparam("case_id"))
    .order_by(plan_proposed.c.case_version.desc())
    .limit(1)
)
_FENCE_TOKEN = select(session_fence.c.token).where(
    session_fence.c.session_id == bindparam("session_id"))
_FENCE_TOKEN_SHARED = _FENCE_TOKEN.with_for_update(read=True)
_CASE_COLUMNS = tuple(ops_case.c.keys())
_STATED_ACTOR = case_timeline.c.meta["stated_actor"].as_string()
_FIRST_ASKED = func.min(case_timeline.c.id)
_REQUESTERS = (
    select(case_timeline.c.actor, _STATED_ACTOR.label("stated_actor"))
    .where(case_timeline.c.case_id == bindparam("case_id"),
           or_(case_timeline.c.event == "case_opened",
               and_(case_timeline.c.event == "plan_ready",
                    case_timeline.c.meta["plan_hash"].as_string() == bindparam("digest"))))
    .group_by(case_timeline.c.actor, _STATED_ACTOR)
    .order_by(_FIRST_ASKED)
)


def lock_case(conn: Connection, case_id: UUID) -> RowMapping | None:
    """The case row, locked for this transaction (SQLite: already locked by BEGIN IMMEDIATE)."""
    return conn.execute(_LOCK_CASE, {"case_id": case_id}).mappings().first()


def lock_case_and_recall(
    conn: Connection, case_id: UUID, key: str
) -> tuple[Mapping[Any, Any] | None, Mapping[Any, Any] | None]:
    """The case row locked for this transaction, and the reply stored for ``key`` if any.

    PostgreSQL answers both in one statement. Its snapshot predates a wait for the lock, so a
    reply committed by the lock's previous holder under the same key is not seen here; that
    late arrival then loses the key's primary-key race on ``record``, and the service's retry
    replays the winner's reply. SQLite needs no such care: BEGIN IMMEDIATE already serialized
    the whole transaction.
    """
    if conn.dialect.name != "postgresql":
        return lock_case(conn, case_id), recall_reply(conn, key)
    row = conn.execute(_LOCK_CASE_WITH_REPLY, {"case_id": case_id, "key": key}).mappings().first()
    if row is None:
        return None, None
    case = {name: row[name] for name in _CASE_COLUMNS}
    if row["reply_fingerprint"] is None:
        return case, None
    return case, {"key": key, "fingerprint": row["reply_fingerprint"],
                  "outcome": row["reply_outcome"], "body": row["reply_body"]}


def read_case(conn: Connection, case_id: UUID,
              channels: Collection[str] | None = None) -> RowMapping | None:
    """The case ``case_id``; with ``channels``, only when its thread is in one of them."""
    query = select(ops_case).where(ops_case.c.id == case_id)
    if channels is not None:
        query = query.where(in_channels(channels))
    return conn.execute(query).mappings().first()


def in_channels(channels: Collection[str], *, threadless: bool = False) -> ColumnElement[bool]:
    """The cases whose chat thread is in one of ``channels``; with ``threadless``, also the
    cases that have no thread (else a case without one is in none)."""
    bound = ops_case.c.id.in_(select(chat_thread.c.case_id)
                              .where(chat_thread.c.channel.in_(sorted(channels))))
    if not threadless:
        return bound
    return or_(bound, ops_case.c.id.not_in(select(chat_thread.c.case_id)))


def case_ids_in_channels(conn: Connection, case_ids: Collection[UUID],
                         channels: Collection[str]) -> set[UUID]:
    """Those of ``case_ids`` whose thread is in one of ``channels``."""
    rows = conn.execute(select(chat_thread.c.case_id).where(
        chat_thread.c.case_id.in_(list(case_ids)), chat_thread.c.channel.in_(sorted(channels))))
    return {row[0] if isinstance(row[0], UUID) else UUID(str(row[0])) for row in rows}


def case_ids_starting_with(conn: Connection, digits: str, limit: int) -> list[UUID]:
    """Up to ``limit`` case ids whose hex digits, dashes left out, start with ``digits`` (the
    same on PostgreSQL's dashed text and SQLite's bare hex)."""
    flat = func.replace(func.lower(cast(ops_case.c.id, String)), "-", "")
    rows = conn.execute(select(ops_case.c.id).where(flat.like(f"{digits}%")).limit(limit))
    return [row[0] if isinstance(row[0], UUID) else UUID(str(row[0])) for row in rows]


def read_timeline(conn: Connection, case_id: UUID) -> list[RowMapping]:
    """The case's whole timeline, oldest first: for a person who asked for all of it (REST,
    export), never for a command or a reader per event (see ``timeline_events``)."""
    query = (
        select(case_timeline).where(case_timeline.c.case_id == case_id).order_by(case_timeline.c.id)
    )
    return list(conn.execute(query).mappings())


def timeline_events(conn: Connection, case_id: UUID, events: Collection[str], *,
                    outcomes: Collection[str] = (), since_id: int | None = None,
                    latest: int | None = None, plan_hash: str | None = None
                    ) -> list[RowMapping]:
    """The case's timeline rows of ``events`` only, oldest first, read through the
    ``(case_id, event, id)`` index: what a rule needs, however many other rows (an alert
    group's notes) the case holds. ``outcomes``: only the rows with one of these outcomes
    (``accepted`` moves...); ``since_id``: from that row on; ``latest``: the last so many;
    ``plan_hash``: only the rows about that plan."""
    query = select(case_timeline).where(case_timeline.c.case_id == case_id,
                                        case_timeline.c.event.in_(sorted(events)))
    if outcomes:
        query = query.where(case_timeline.c.meta["outcome"].as_string().in_(sorted(outcomes)))
    if since_id is not None:
        query = query.where(case_timeline.c.id >= since_id)
    if plan_hash is not None:
        query = query.where(case_timeline.c.meta["plan_hash"].as_string() == plan_hash)
    if latest is None:
        return list(conn.execute(query.order_by(case_timeline.c.id)).mappings())
    newest = list(conn.execute(query.order_by(case_timeline.c.id.desc()).limit(latest))
                  .mappings())
    return newest[::-1]


def requesters(conn: Connection, case_id: UUID, digest: str) -> list[tuple[str, str | None]]:
    """Who opened the case and who proposed the plan ``digest`` on it: each distinct (actor,
    stated actor) of those rows once, in the order they first asked. The database folds the
    rows, so however often the plan was proposed again, a handful come back."""
    rows = conn.execute(_REQUESTERS, {"case_id": case_id, "digest": digest})
    return [(str(actor), None if stated is None else str(stated)) for actor, stated in rows]


def timeline_tail(conn: Connection, case_id: UUID, rows: int) -> tuple[list[RowMapping], int]:
    """The case's last ``rows`` timeline rows, oldest first, and how many rows it holds (the
    count an index answers: no row is read for it)."""
    newest = list(conn.execute(select(case_timeline).where(case_timeline.c.case_id == case_id)
                               .order_by(case_timeline.c.id.desc()).limit(rows)).mappings())
    total = conn.execute(select(func.count()).select_from(case_timeline)
                         .where(case_timeline.c.case_id == case_id)).scalar_one()
    return newest[::-1], int(total)


def recall_reply(conn: Connection, key: str) -> RowMapping | None:
    return conn.execute(_RECALL_REPLY, {"key": key}).mappings().first()


def fence_token(conn: Connection, session_id: str) -> int | None:
    """The highest fence token issued for the session, share-locked so no newer one can be
    issued until this transaction ends."""
    query = _FENCE_TOKEN_SHARED if conn.dialect.name == "postgresql" else _FENCE_TOKEN
    token = conn.execute(query, {"session_id": session_id}).scalar()
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
    return conn.execute(_LATEST_PLAN, {"case_id": case_id}).mappings().first()


def plan_by_hash(conn: Connection, case_id: UUID, digest: str) -> RowMapping | None:
    """The case's latest proposed plan with hash ``digest`` (the one an approval names)."""
    query = (select(plan_proposed)
             .where(plan_proposed.c.case_id == case_id, plan_proposed.c.plan_hash == digest)
             .order_by(plan_proposed.c.case_version.desc()).limit(1))
    return conn.execute(query).mappings().first()


def plan_of_version(conn: Connection, case_id: UUID, version: int,
                    digest: str) -> RowMapping | None:
    """The case's plan ``digest`` as proposed at case ``version`` (one proposal of it)."""
    query = select(plan_proposed).where(plan_proposed.c.case_id == case_id,
                                        plan_proposed.c.case_version == version,
                                        plan_proposed.c.plan_hash == digest)
    return conn.execute(query).mappings().first()


def name_components(conn: Connection, case_id: UUID, names: Sequence[str]) -> None:
    """Set the catalog components a case concerns (``CaseService.name_components``)."""
    conn.execute(update(ops_case).where(ops_case.c.id == case_id)
                 .values(components=list(names)))


def plan_decisions(conn: Connection, plan_id: UUID) -> list[ApprovalDecision]:
    """The approvers' decisions recorded for one proposed plan, oldest first."""
    query = (select(plan_approved.c.decision).where(plan_approved.c.plan_id == plan_id)
             .order_by(plan_approved.c.created_at, plan_approved.c.id))
    decisions: list[Any] = [dict(decision) for decision in conn.execute(query).scalars()]
    return decisions  # the JSON the gate wrote (decision_row): read as it was written


def list_cases(conn: Connection, status: str | None, limit: int,
               channels: Collection[str] | None = None, *,
               threadless: bool = False) -> list[RowMapping]:
    query = select(ops_case).order_by(ops_case.c.created_at.desc()).limit(limit)
    if status is not None:
        query = query.where(ops_case.c.status == status)
    if channels is not None:
        query = query.where(in_channels(channels, threadless=threadless))
    return list(conn.execute(query).mappings())


# -- one request's writes, gathered --------------------------------------------------------------

@dataclass
class Writes:
    """Every row one request writes, gathered by the service and written once by ``write``.

    Rows are plain mappings keyed by column name; ``write`` keeps the contract's order: new
    case, its chat thread, plan, approval, case move, timeline, outbox, reply.
    """

    new_case: Mapping[str, Any] | None = None
    thread: Mapping[str, Any] | None = None
    plan: Mapping[str, Any] | None = None
    approval: Mapping[str, Any] | None = None
    moved_case: Mapping[str, Any] | None = None
    timeline: Mapping[str, Any] | None = None
    outbox: list[Message] = field(default_factory=list)
    reply: Mapping[str, Any] | None = None

    def parts(self) -> list[tuple[tuple[str, int], dict[str, Any]]]:
        """Each table's share of the writes, in order: ((part, rows), bound parameters)."""
        found: list[tuple[tuple[str, int], dict[str, Any]]] = []
        for part in ("new_case", "thread", "plan", "approval", "moved_case", "timeline"):
            row = getattr(self, part)
            if row is not None:
                found.append(((part, 1), {f"{part}_{c}": row[c] for c in _COLUMNS[part]}))
        if self.outbox:
            params = {}
            for n, message in enumerate(self.outbox):
                # UTC before binding: SQLite keeps a datetime's wall time and drops its zone.
                when = message.deliver_after
                params.update({f"outbox{n}_topic": message.topic, f"outbox{n}_key": message.key,
                               f"outbox{n}_payload": message.payload,
                               f"outbox{n}_deliver_after": when and when.astimezone(UTC)})
            found.append((("outbox", len(self.outbox)), params))
        if self.reply is not None:
            found.append((("reply", 1), {f"reply_{c}": self.reply[c] for c in _COLUMNS["reply"]}))
        return found


_COLUMNS: dict[str, tuple[str, ...]] = {
    "new_case": ("id", "tenant", "title", "severity", "status", "version", "created_at",
                 "updated_at", "components"),
    "thread": ("team", "channel", "thread_ts", "case_id", "created_at"),
    "plan": ("id", "case_id", "case_version", "plan_hash", "plan", "proposed_by"),
    "approval": ("id", "case_id", "plan_id", "plan_hash", "decision", "policies",
                 "policy_version"),
    "moved_case": ("id", "status", "version", "updated_at"),
    "timeline": ("case_id", "event", "actor", "reason", "correlation_id", "meta", "created_at"),
    "reply": ("key", "fingerprint", "outcome", "body"),
}
_TABLES: dict[str, Table] = {
    "new_case": ops_case, "thread": chat_thread, "plan": plan_proposed,
    "approval": plan_approved, "timeline": case_timeline, "reply": idempotency,
}
_STATEMENTS: dict[tuple[object, ...], Insert | Update] = {}


def write(conn: Connection, writes: Writes) -> None:
    """Write the gathered rows. PostgreSQL gets one statement (each table's share a
    data-modifying CTE: one round trip); SQLite, which has none, one statement per table."""
    parts = writes.parts()
    if conn.dialect.name == "postgresql" and len(parts) > 1:
        shapes = tuple(shape for shape, _ in parts)
        merged = {name: value for _, params in parts for name, value in params.items()}
        conn.execute(_statement(("together", *shapes)), merged)
        return
    for shape, params in parts:
        conn.execute(_statement(shape), params)


def _statement(shape: tuple[Any, ...]) -> Insert | Update:
    """The statement of one table's share, or of several together; built once per shape."""
    statement = _STATEMENTS.get(shape)
    if statement is None:
        if shape[0] == "together":
            *firsts, last = (_part_statement(*part) for part in shape[1:])
            statement = last.add_cte(*(s.cte(f"write_{n}") for n, s in enumerate(firsts)))
        else:
            statement = _part_statement(*shape)
        _STATEMENTS[shape] = statement
    return statement


def _part_statement(part: str, rows: int) -> Insert | Update:
    if part == "moved_case":
        return (update(ops_case).where(ops_case.c.id == _bind(part, ops_case.c.id))
                .values({c: _bind(part, ops_case.c[c]) for c in _COLUMNS[part][1:]}))
    if part == "outbox":
        # INSERT … SELECT … UNION ALL rather than a multi-row VALUES, which SQLAlchemy never
        # caches; the rows (and so their ids) keep the order of the messages.
        columns = ("topic", "key", "payload", "deliver_after")
        rows_selected = [select(*(_bind(f"outbox{n}", outbox.c[c]).label(c) for c in columns))
                         for n in range(rows)]
        source = rows_selected[0] if rows == 1 else union_all(*rows_selected)
        return insert(outbox).from_select(columns, source)
    table = _TABLES[part]
    return insert(table).values({c: _bind(part, table.c[c]) for c in _COLUMNS[part]})


def _bind(prefix: str, column: Column[Any]) -> Any:
    # Typed explicitly: a parameter in a SELECT list (the outbox rows) gets no type from the
    # column it ends up in, and the type is what turns a dict into JSON.
    return bindparam(f"{prefix}_{column.name}", type_=column.type)
