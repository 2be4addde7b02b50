"""The tool call ledger: the durable record of every side effect, and the claim store itself
when there is no Redis.

The primary key decides the first arrival; a lease with an owner token is taken and given back
with conditional UPDATEs (compare-and-set on ``owner``). A row left ``in_progress`` past its
lease is a call that may have run without its result being stored: it is reported by
``stuck()`` for reconciliation, and re-claimed only for tools declared idempotent.

A completion that arrives after its lease was lost (the lease ended, or another owner took the
key over) is never recorded as a fact: the ledger says ``unknown_outcome`` and keeps what the
call returned and why it is not trusted (``completion_of`` is the rule); ``unknown()`` lists
those for a person.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from core.clock import Clock, utcnow
from core.db import case_store
from core.db.database import connection, transaction
from core.db.tables import tool_call_ledger as ledger_table
from core.errors import Unavailable
from core.gateway.model import Outcome, ToolCall
from core.tracing import current as current_correlation_id


class LedgerState(StrEnum):
    IN_PROGRESS = "in_progress"
    DONE = "done"
    REFUSED = "refused"  # a stored business refusal
    RELEASED = "released"  # a transient failure gave the claim back; a retry may run
    UNKNOWN_OUTCOME = "unknown_outcome"  # finished after its lease was lost: a person checks


class Completion(StrEnum):
    """What the ledger made of a completion."""

    RECORDED = "recorded"  # the owner still held the claim: the outcome is the record
    UNKNOWN = "unknown"  # the owner's lease had ended: recorded as unknown_outcome
    TAKEN_OVER = "taken_over"  # another owner holds the key: ours kept in a late row


LATE = ":late:"
"""Between a key and the late owner's token in the key of a late completion's own row."""


def completion_of(state: LedgerState | None, holder: str | None, lease_until: datetime | None,
                  owner: str, now: datetime) -> Completion:
    """The ledger's rule for a completion by ``owner`` of a row in ``state`` held by ``holder``
    until ``lease_until``: recorded while the owner's lease holds (or when the owner already
    finished the row: a retry after a lost reply); unknown once the lease ended (or the claim
    was released) under the same owner; taken over once the key belongs to anyone else."""
    if state is None or holder != owner:
        return Completion.TAKEN_OVER
    if state in (LedgerState.DONE, LedgerState.REFUSED):
        return Completion.RECORDED
    if state is LedgerState.IN_PROGRESS and lease_until is not None and now < lease_until:
        return Completion.RECORDED
    return Completion.UNKNOWN


@dataclass(frozen=True)
class Intent:
    """One call as the stores claim it: its key, fingerprint, owner token and fence."""

    key: str
    call: ToolCall
    args_hash: str
    owner: str
    fence: int | None
    idempotent: bool
    lease_s: float


@dataclass(frozen=True)
class LedgerClaim:
    """``outcome``: claimed | replay | in_progress | mismatch | stale_fence |
    needs_reconciliation."""

    outcome: str
    stored: Outcome | None = None
    attempts: int = 1
    latest_fence: int | None = None


@dataclass(frozen=True)
class LedgerEntry:
    """A ledger row as reconciliation and tests read it."""

    key: str
    tool: str
    args_hash: str
    args: dict[str, Any]
    actor: str
    session_id: str
    fence: int | None
    state: LedgerState
    result: Any
    error: dict[str, Any] | None
    owner: str | None
    lease_until: datetime | None
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, row: RowMapping) -> LedgerEntry:
        return cls(
            key=row["key"], tool=row["tool"], args_hash=row["args_hash"], args=dict(row["args"]),
            actor=row["actor"], session_id=row["session_id"], fence=row["fence"],
            state=LedgerState(row["state"]), result=row["result"], error=row["error"],
            owner=row["owner"], lease_until=_utc(row["lease_until"]),
            attempts=int(row["attempts"]), started_at=_utc(row["started_at"]),
            finished_at=_utc(row["finished_at"]),
        )


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else case_store.as_utc(moment)


class _Raced(Exception):
    """Another transaction inserted the key between our read and our insert."""


class Ledger:
    """Claims, completions, releases and reads of ``tool_call_ledger`` rows."""

    def __init__(self, engine: Engine, *, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.clock = clock

    def claim(self, intent: Intent) -> LedgerClaim:
        """Claim ``intent.key`` for ``intent.owner`` or say why not, in one transaction."""
        for _ in range(3):
            try:
                with self._transaction() as conn:
                    return self._claim(conn, intent)
            except _Raced:
                continue
        raise Unavailable("the ledger row kept changing under the claim; retry", key=intent.key)

    def complete(self, key: str, owner: str, outcome: Outcome,
                 business_key: str | None = None) -> Completion:
        """Record the outcome if ``owner`` still holds the claim; else record that the outcome
        is unknown, keeping what the call returned (``completion_of``), in one transaction.
        ``business_key``: the call's, kept with an unknown outcome to say which intent it was."""
        now = self.clock()
        with self._transaction() as conn:
            row = conn.execute(select(ledger_table).where(ledger_table.c.key == key)
                               .with_for_update()).mappings().first()
            verdict = _completion_of_row(row, owner, now)
            if row is not None:
                self._write_completion(conn, row, verdict, owner, outcome, business_key, now)
        return verdict

    def release(self, key: str, owner: str) -> bool:
        """Give the claim back after a transient failure, if ``owner`` still owns it."""
        values = {"state": str(LedgerState.RELEASED), "lease_until": None,
                  "finished_at": self.clock()}
        return self._owned_update(key, owner, LedgerState.RELEASED, values)

    def entry(self, key: str) -> LedgerEntry | None:
        with self._connection() as conn:
            row = conn.execute(select(ledger_table).where(ledger_table.c.key == key))
            found = row.mappings().first()
        return None if found is None else LedgerEntry.of(found)

    def unknown(self, limit: int = 100) -> list[LedgerEntry]:
        """Calls whose outcome is unknown (they finished after losing their lease): a person
        checks the target, oldest first."""
        query = (select(ledger_table)
                 .where(ledger_table.c.state == str(LedgerState.UNKNOWN_OUTCOME))
                 .order_by(ledger_table.c.finished_at).limit(limit))
        with self._connection() as conn:
            return [LedgerEntry.of(row) for row in conn.execute(query).mappings()]

    def stuck(self, now: datetime | None = None, limit: int = 100) -> list[LedgerEntry]:
        """Calls left in progress past their lease: they may have run without a stored result."""
        query = (
            select(ledger_table)
            .where(ledger_table.c.state == str(LedgerState.IN_PROGRESS),
                   ledger_table.c.lease_until < (now or self.clock()))
            .order_by(ledger_table.c.lease_until)
            .limit(limit)
        )
        with self._connection() as conn:
            return [LedgerEntry.of(row) for row in conn.execute(query).mappings()]

    # -- the claim ------------------------------------------------------------------------

    def _claim(self, conn: Connection, intent: Intent) -> LedgerClaim:
        # The first arrival is one INSERT: the primary key decides, nothing is read before.
        now, stale = self.clock(), _stale_fence(conn, intent)
        if stale is None and self._insert(conn, intent, now):
            return LedgerClaim("claimed")
        query = select(ledger_table).where(ledger_table.c.key == intent.key).with_for_update()
        row = conn.execute(query).mappings().first()
        if row is not None:
            return self._claim_existing(conn, row, intent, now, stale)
        if stale is not None:
            return stale
        raise _Raced  # the row we collided with was rolled back: try again

    def _claim_existing(self, conn: Connection, row: RowMapping, intent: Intent,
                        now: datetime, stale: LedgerClaim | None) -> LedgerClaim:
        state, attempts = LedgerState(row["state"]), int(row["attempts"])
        if row["args_hash"] != intent.args_hash:
            return LedgerClaim("mismatch")
        if state in (LedgerState.DONE, LedgerState.REFUSED):
            stored = Outcome(result=row["result"], error=row["error"], fence=row["fence"],
                             attempts=attempts)
            return LedgerClaim("replay", stored, attempts)
        if state is LedgerState.IN_PROGRESS:
            if row["owner"] == intent.owner:
                return LedgerClaim("claimed", attempts=attempts)
            if case_store.as_utc(row["lease_until"]) > now:
                return LedgerClaim("in_progress", attempts=attempts)
            if not intent.idempotent:
                return LedgerClaim("needs_reconciliation", attempts=attempts)
        if state is LedgerState.UNKNOWN_OUTCOME and not intent.idempotent:
            return LedgerClaim("needs_reconciliation", attempts=attempts)
        if stale is not None:
            return stale
        self._reclaim(conn, row, intent, now)
        return LedgerClaim("claimed", attempts=attempts + 1)

    def _insert(self, conn: Connection, intent: Intent, now: datetime) -> bool:
        dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        call = intent.call
        statement = dialect_insert(ledger_table).values(
            key=intent.key, tool=call.tool, args_hash=intent.args_hash, args=dict(call.args),
            actor=call.actor, session_id=call.session_id, fence=intent.fence,
            state=str(LedgerState.IN_PROGRESS), owner=intent.owner,
            lease_until=now + timedelta(seconds=intent.lease_s), attempts=1, started_at=now,
            correlation_id=current_correlation_id(),
        ).on_conflict_do_nothing(index_elements=[ledger_table.c.key])
        return conn.execute(statement.returning(ledger_table.c.key)).first() is not None

    def _write_completion(self, conn: Connection, row: RowMapping, verdict: Completion,
                          owner: str, outcome: Outcome, business_key: str | None,
                          now: datetime) -> None:
        if verdict is Completion.RECORDED:
            state = LedgerState.DONE if outcome.error is None else LedgerState.REFUSED
            _set(conn, row["key"], {"state": str(state), "result": outcome.result,
                                    "error": outcome.error, "lease_until": None,
                                    "finished_at": now})
            return
        kept = _kept(outcome, _why(row, verdict), business_key)
        if verdict is Completion.TAKEN_OVER:
            self._insert_late(conn, row, owner, now, kept)
        elif row["state"] != str(LedgerState.UNKNOWN_OUTCOME):  # else a retry: kept already
            _set(conn, row["key"], {"state": str(LedgerState.UNKNOWN_OUTCOME), "result": kept,
                                    "error": None, "lease_until": None, "finished_at": now})

    def _insert_late(self, conn: Connection, row: RowMapping, owner: str, now: datetime,
                     kept: dict[str, Any]) -> None:
        """A late completion of a key someone else holds: a row of its own, so the new owner's
        record stays theirs and ours is not lost (a retry after a lost reply inserts nothing)."""
        dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        conn.execute(dialect_insert(ledger_table).values(
            key=f"{row['key']}{LATE}{owner}", tool=row["tool"], args_hash=row["args_hash"],
            args=row["args"], actor=row["actor"], session_id=row["session_id"],
            fence=row["fence"], state=str(LedgerState.UNKNOWN_OUTCOME), result=kept,
            owner=owner, attempts=row["attempts"], started_at=None, finished_at=now,
            correlation_id=current_correlation_id() or row.get("correlation_id"),
        ).on_conflict_do_nothing(index_elements=[ledger_table.c.key]))

    def _reclaim(self, conn: Connection, row: RowMapping, intent: Intent, now: datetime) -> None:
        # Compare-and-set on the owner and state we read: the row is locked on PostgreSQL and
        # the whole transaction is exclusive on SQLite, so this cannot miss; it guards anyway.
        statement = (
            update(ledger_table)
            .where(ledger_table.c.key == intent.key, ledger_table.c.state == row["state"],
                   _owner_is(row["owner"]))
            .values(state=str(LedgerState.IN_PROGRESS), owner=intent.owner,
                    lease_until=now + timedelta(seconds=intent.lease_s), fence=intent.fence,
                    actor=intent.call.actor, session_id=intent.call.session_id,
                    attempts=ledger_table.c.attempts + 1, started_at=now, finished_at=None,
                    result=None, error=None,
                    correlation_id=current_correlation_id() or row.get("correlation_id"))
        )
        if conn.execute(statement).rowcount != 1:
            raise _Raced

    def _owned_update(self, key: str, owner: str, target: LedgerState,
                      values: dict[str, Any]) -> bool:
        # Also matches a row this owner already moved to ``target``: a retry after the
        # COMMIT's reply was lost must hear "yes", not "you lost the claim".
        states = (str(LedgerState.IN_PROGRESS), str(target))
        statement = (
            update(ledger_table)
            .where(ledger_table.c.key == key, ledger_table.c.owner == owner,
                   ledger_table.c.state.in_(states))
            .values(**values)
        )
        with self._transaction() as conn:
            return conn.execute(statement).rowcount == 1

    # -- connections ----------------------------------------------------------------------

    def _transaction(self) -> AbstractContextManager[Connection]:
        return transaction(self.engine, "the tool call ledger")

    def _connection(self) -> AbstractContextManager[Connection]:
        return connection(self.engine, "the tool call ledger")


def _completion_of_row(row: RowMapping | None, owner: str, now: datetime) -> Completion:
    if row is None:
        return completion_of(None, None, None, owner, now)
    return completion_of(LedgerState(row["state"]), row["owner"], _utc(row["lease_until"]),
                         owner, now)


def _why(row: RowMapping, verdict: Completion) -> str:
    """Why a late completion's outcome is not trusted, in words."""
    if verdict is Completion.TAKEN_OVER:
        return "another run took the call over before it finished"
    if row["state"] == str(LedgerState.IN_PROGRESS) and row["lease_until"] is not None:
        ended = case_store.as_utc(row["lease_until"]).isoformat(timespec="seconds")
        return f"its lease ended at {ended} before it finished"
    return "its claim was released before it finished"


def _kept(outcome: Outcome, why: str, business_key: str | None) -> dict[str, Any]:
    """What an unknown outcome keeps: what the call returned, why it is not trusted."""
    kept: dict[str, Any] = {"returned": outcome.result, "why": why}
    if outcome.error is not None:
        kept["refused"] = outcome.error
    if business_key is not None:
        kept["business_key"] = business_key
    return kept


def _set(conn: Connection, key: str, values: dict[str, Any]) -> None:
    conn.execute(update(ledger_table).where(ledger_table.c.key == key).values(**values))


def _owner_is(owner: str | None) -> Any:
    column = ledger_table.c.owner
    return column.is_(None) if owner is None else column == owner


def _stale_fence(conn: Connection, intent: Intent) -> LedgerClaim | None:
    """Refuse a fence lower than the highest issued for the session (read share-locked)."""
    if intent.fence is None:
        return None
    latest = case_store.fence_token(conn, intent.call.session_id)
    if latest is not None and intent.fence >= latest:
        return None
    return LedgerClaim("stale_fence", latest_fence=latest)
