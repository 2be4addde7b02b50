"""The per-session run lock: one agent run per session at a time, held as a lease with an owner
token. Each acquisition issues a new fence token from the database, so a run that lost its lock
(lease expired, someone else acquired) is refused by the core when it writes with its old fence.

Redis: SET NX PX, released and renewed by compare-and-set on the owner; the lease runs on
Redis' own clock (one clock for every process, whatever their hosts' clocks say). Without
Redis: the ``session_lock`` table, with conditional UPDATEs, in the same transaction that issues
the fence; its lease runs on the injected clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import redis
from sqlalchemy import Connection, Engine, delete, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from core.clock import Clock, utcnow
from core.db import case_store
from core.db.database import transaction
from core.db.tables import session_lock as lock_table
from core.domain.commands import Fence
from core.errors import Unavailable
from core.gateway.redis_store import LuaScript

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


@dataclass(frozen=True)
class SessionLease:
    """A held session lock (a lease until released or expired): its owner token and the fence
    token its writes must carry."""

    session_id: str
    owner: str
    fence: Fence


class SessionLock(Protocol):
    def acquire(self, session_id: str, *, wait_s: float = 0.0) -> SessionLease | None: ...

    def renew(self, run: SessionLease) -> bool: ...

    def release(self, run: SessionLease) -> bool: ...


@contextmanager
def holding(locks: SessionLock, session_id: str, *, wait_s: float = 0.0) -> Iterator[SessionLease]:
    """Hold the session's lock for a ``with`` block; Unavailable if it stays taken."""
    run = locks.acquire(session_id, wait_s=wait_s)
    if run is None:
        raise Unavailable(f"session {session_id} is running elsewhere; retry later",
                          session_id=session_id)
    try:
        yield run
    finally:
        locks.release(run)


def _poll(try_once: Callable[[], SessionLease | None], wait_s: float) -> SessionLease | None:
    deadline = time.monotonic() + wait_s
    while True:
        run = try_once()
        if run is not None or time.monotonic() >= deadline:
            return run
        time.sleep(0.02)


class RedisSessionLock:
    """The lock in Redis; the fence from the database."""

    def __init__(self, client: redis.Redis, engine: Engine, *, prefix: str = "opsgate:gw:",
                 lease_s: float = 30.0) -> None:
        self.client = client
        self.engine = engine
        self.prefix = prefix + "lock:"
        self.lease_ms = max(1, int(lease_s * 1000))
        self._release = LuaScript(_RELEASE)
        self._renew = LuaScript(_RENEW)

    def acquire(self, session_id: str, *, wait_s: float = 0.0) -> SessionLease | None:
        return _poll(lambda: self._try(session_id), wait_s)

    def _try(self, session_id: str) -> SessionLease | None:
        owner = uuid.uuid4().hex
        try:
            taken = self.client.set(self.prefix + session_id, owner, nx=True, px=self.lease_ms)
        except redis.RedisError as exc:
            raise Unavailable("Redis is unavailable for the session lock") from exc
        if not taken:
            return None
        try:
            with transaction(self.engine, "the session lock") as conn:
                token = case_store.issue_fence(conn, session_id)
        except Exception:
            self.release(SessionLease(session_id, owner, Fence(session_id, 0)))
            raise
        return SessionLease(session_id, owner, Fence(session_id, token))

    def renew(self, run: SessionLease) -> bool:
        return bool(self._renew(self.client, [self.prefix + run.session_id],
                                [run.owner, self.lease_ms]))

    def release(self, run: SessionLease) -> bool:
        return bool(self._release(self.client, [self.prefix + run.session_id], [run.owner]))


class SqlSessionLock:
    """The lock as a ``session_lock`` row; acquired and fenced in one transaction."""

    def __init__(self, engine: Engine, *, lease_s: float = 30.0, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.lease = timedelta(seconds=lease_s)
        self.clock = clock

    def acquire(self, session_id: str, *, wait_s: float = 0.0) -> SessionLease | None:
        return _poll(lambda: self._try(session_id), wait_s)

    def _try(self, session_id: str) -> SessionLease | None:
        owner, now = uuid.uuid4().hex, self.clock()
        with transaction(self.engine, "the session lock") as conn:
            if not self._take(conn, session_id, owner, now):
                return None
            return SessionLease(session_id, owner,
                              Fence(session_id, case_store.issue_fence(conn, session_id)))

    def _take(self, conn: Connection, session_id: str, owner: str, now: datetime) -> bool:
        dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        inserted = conn.execute(
            dialect_insert(lock_table)
            .values(session_id=session_id, owner=owner, lease_until=now + self.lease)
            .on_conflict_do_nothing(index_elements=[lock_table.c.session_id])
            .returning(lock_table.c.session_id)
        ).first()
        if inserted is not None:
            return True
        expired = (
            update(lock_table)
            .where(lock_table.c.session_id == session_id, lock_table.c.lease_until < now)
            .values(owner=owner, lease_until=now + self.lease)
        )
        return conn.execute(expired).rowcount == 1

    def renew(self, run: SessionLease) -> bool:
        statement = (
            update(lock_table)
            .where(lock_table.c.session_id == run.session_id, lock_table.c.owner == run.owner)
            .values(lease_until=self.clock() + self.lease)
        )
        with transaction(self.engine, "the session lock") as conn:
            return conn.execute(statement).rowcount == 1

    def release(self, run: SessionLease) -> bool:
        statement = delete(lock_table).where(lock_table.c.session_id == run.session_id,
                                             lock_table.c.owner == run.owner)
        with transaction(self.engine, "the session lock") as conn:
            return conn.execute(statement).rowcount == 1
