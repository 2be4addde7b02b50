"""Engines for the two databases opsgate runs on, with the transaction behaviour the core needs.

PostgreSQL: psycopg 3, READ COMMITTED, row locks with ``SELECT … FOR UPDATE``.
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
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError

from core.errors import Unavailable

log = logging.getLogger(__name__)


def normalize_url(url: str) -> str:
    """Use the psycopg 3 driver for plain ``postgresql://`` URLs."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def make_engine(url: str, *, pool_size: int = 10, **kwargs: Any) -> Engine:
    """An engine for ``url`` set up for opsgate's transactions."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
        _setup_sqlite(engine)
        return engine
    return create_engine(
        url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, **kwargs
    )


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
