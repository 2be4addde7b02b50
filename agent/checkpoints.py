"""The LangGraph checkpointer on the application's own database: ``SqliteSaver`` on the
embedded SQLite file, ``PostgresSaver`` on PostgreSQL (plain ``postgresql://`` URI, an
autocommit psycopg connection with dict rows; the URL's ``options``, e.g. a test schema's
``search_path``, are kept). Its tables are created by ``setup()``, not by alembic, one process at
a time (an advisory lock) and without ``CREATE INDEX CONCURRENTLY``."""

from __future__ import annotations

import sqlite3
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from sqlalchemy import Engine


class Checkpoints:
    """Owns the checkpointer's connection; ``close()`` releases it."""

    def __init__(self, saver: BaseCheckpointSaver[Any], close: Any) -> None:
        self.saver = saver
        self._close = close

    def close(self) -> None:
        self._close()


def plain_postgres_uri(engine: Engine) -> str:
    """``postgresql+psycopg://…`` → ``postgresql://…``, password and query kept."""
    url = engine.url.set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


def open_checkpoints(engine: Engine) -> Checkpoints:
    """A set-up checkpointer on ``engine``'s database."""
    if engine.dialect.name == "postgresql":
        return _postgres_checkpoints(engine)
    return _sqlite_checkpoints(engine)


def _postgres_checkpoints(engine: Engine) -> Checkpoints:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    class CasePostgresSaver(PostgresSaver):
        """The saver with its table migrations run without CONCURRENTLY: a concurrent
        index build waits for every older transaction in the database (other processes'
        setups included), and the indexes are created while their tables are still empty."""

        MIGRATIONS = [m.replace("INDEX CONCURRENTLY", "INDEX")
                      for m in PostgresSaver.MIGRATIONS]

    conn: Connection[Any] = Connection.connect(
        plain_postgres_uri(engine), autocommit=True, prepare_threshold=0,
        row_factory=dict_row)
    pg_saver = CasePostgresSaver(conn)
    # One setup at a time per schema: N processes starting together must not race on
    # CREATE TABLE IF NOT EXISTS (its catalog insert is not idempotent under concurrency).
    lock = "select pg_advisory_lock(hashtext('opsgate.checkpoints:' || current_schema()))"
    conn.execute(lock)
    try:
        pg_saver.setup()
    finally:
        conn.execute("select pg_advisory_unlock(hashtext('opsgate.checkpoints:' || "
                     "current_schema()))")
    return Checkpoints(pg_saver, conn.close)


def _sqlite_checkpoints(engine: Engine) -> Checkpoints:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = engine.url.database or ":memory:"
    lite = sqlite3.connect(path, check_same_thread=False, timeout=30)
    sqlite_saver = SqliteSaver(lite)
    sqlite_saver.setup()
    return Checkpoints(sqlite_saver, lite.close)
