"""Engines for the two databases opsgate runs on, with the transaction behaviour the core needs.

PostgreSQL: psycopg 3, READ COMMITTED, row locks with ``SELECT … FOR UPDATE``. A connection
that no longer answers is found out, never waited on forever: TCP keepalives and
``tcp_user_timeout`` end one whose packets are dropped (a network blackhole) and
``connect_timeout`` bounds a new one; inside ``bounded_waits`` (each HTTP request,
``core/api/deadlines.py``) every wait for PostgreSQL's answer and every connect is bounded too,
so a stalled server (a frozen process, a proxy that forwards nothing: the kernel still
acknowledges) makes the request 503 within seconds instead of hanging.
SQLite: WAL, a busy timeout, and ``BEGIN IMMEDIATE`` so every write transaction takes the write
lock up front; that is SQLite's equivalent of locking the case row. Every connection loads
sqlite-vec, the librarian's vector search, when Python's ``sqlite3`` can load extensions (Debian's
and the official images' can; pyenv's default build cannot): without it the library recalls by
words alone and says so (``core.library.vectors``). One copy of SQLite only: the agent's
checkpoints open the same file, and two copies in one process corrupt it.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any, TypeVar

import psycopg
from psycopg.abc import PQGen
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError

from core.errors import Unavailable

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10
"""How long a new PostgreSQL connection may take to be established (libpq ``connect_timeout``)."""
TCP = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
       "tcp_user_timeout": 30_000}
"""A connection whose packets are dropped is closed by the kernel within about 30 s."""
_WAIT_BOUND: ContextVar[float | None] = ContextVar("opsgate_db_wait_bound", default=None)
RV = TypeVar("RV")


def normalize_url(url: str) -> str:
    """Use the psycopg 3 driver for plain ``postgresql://`` URLs."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def make_engine(url: str, *, pool_size: int = 10, connect_args: dict[str, Any] | None = None,
                **kwargs: Any) -> Engine:
    """An engine for ``url`` set up for opsgate's transactions; ``connect_args`` add to (or
    override) the driver arguments it sets."""
    url = normalize_url(url)
    given = connect_args or {}
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, **given}, **kwargs)
        _setup_sqlite(engine)
        return engine
    engine = create_engine(
        url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S, **TCP, **given}, **kwargs
    )
    event.listen(engine, "do_connect", _bounded_connect)
    return engine


@contextmanager
def bounded_waits(seconds: float) -> Iterator[None]:
    """Within it, each wait for PostgreSQL (an answer, a new connection) on this context lasts
    at most ``seconds`` (at least 2 for a connection, libpq's least); past that the connection
    is closed and the statement fails as a lost connection (``Unavailable``: 503, retry)."""
    token = _WAIT_BOUND.set(seconds)
    try:
        yield
    finally:
        _WAIT_BOUND.reset(token)


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits ``bounded_waits`` bounds (unbounded outside it)."""

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        bound = _WAIT_BOUND.get()
        if bound is None or (timeout is not None and timeout <= bound):
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, bound)
        except psycopg.errors._WaitTimeout:  # psycopg's own "no answer within the timeout"
            self.pgconn.finish()  # the protocol is mid-way: the connection cannot be reused
            raise psycopg.OperationalError(
                f"PostgreSQL did not answer within {bound:g}s; the connection is closed"
            ) from None


def _bounded_connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
    bound = _WAIT_BOUND.get()
    if bound is not None:
        cparams = {**cparams, "connect_timeout": max(2, math.ceil(bound))}
    return BoundedConnection.connect(*cargs, **cparams)


def _setup_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below issue BEGIN, not pysqlite's own deferred BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()
        _load_sqlite_vec(dbapi_connection)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _load_sqlite_vec(dbapi_connection: Any) -> None:
    import sqlite3

    try:
        dbapi_connection.enable_load_extension(True)
        dbapi_connection.load_extension(_sqlite_vec_path())
        dbapi_connection.enable_load_extension(False)
    except (AttributeError, sqlite3.Error) as exc:  # no extension loading, or a broken file
        log.debug("sqlite-vec not loaded: %s", exc)


@cache
def _sqlite_vec_path() -> str:
    """The sqlite-vec package's loadable extension (what ``sqlite_vec.loadable_path()`` names),
    found without running the package's ``__init__``, which imports numpy (a tenth of a second
    of every process on SQLite) for helpers opsgate does not use."""
    spec = importlib.util.find_spec("sqlite_vec")
    folders = list(spec.submodule_search_locations or []) if spec else []
    return os.path.normpath(os.path.join(folders[0], "vec0")) if folders else "vec0"


@contextmanager
def outage_is_unavailable(what: str = "the database") -> Iterator[None]:
    """Connection loss, lock time-outs and serialization failures are transient: never stored,
    raised as ``Unavailable`` so the caller retries."""
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        raise Unavailable(f"{what} is unavailable right now; nothing was written; retry") from exc


@contextmanager
def transaction(engine: Engine, what: str = "the database") -> Iterator[Connection]:
    """One committed transaction, with outages raised as ``Unavailable``."""
    with outage_is_unavailable(what), engine.begin() as conn:
        yield conn


@contextmanager
def connection(engine: Engine, what: str = "the database") -> Iterator[Connection]:
    """A connection for reads, with outages raised as ``Unavailable``."""
    with outage_is_unavailable(what), engine.connect() as conn:
        yield conn
