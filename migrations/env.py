"""Alembic environment: one migration history for SQLite and PostgreSQL.

The URL comes from the caller's config (``opsgate migrate`` sets it from settings) or from
``OPSGATE_DATABASE_URL``. SQLite runs in batch mode so ALTERs work there too. ``alembic check``
and autogenerate compare the database with every table the code declares (core and bot).
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection

# Imported for their tables, which join core.db.tables.metadata.
import core.analysis.tables
import core.library.tables  # noqa: F401
from bot.tables import metadata as slack_metadata
from core.db.database import make_engine
from core.db.tables import metadata
from core.settings import load_settings

config = context.config


def _declared(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Leave out the search machinery the database owns (see core/library/tables.py): PostgreSQL's
    generated ``kb_chunk.tsv`` and its GIN index, SQLite's FTS5 table ``kb_chunk_fts`` and the
    shadow tables FTS5 makes for it, and the vectors' ``kb_vector`` (core/library/vectors.py).
    Only objects that exist in the database alone are skipped."""
    if not reflected or compare_to is not None:
        return True
    if type_ == "table":
        return not (name or "").startswith(("kb_chunk_fts", "kb_vector"))
    if type_ == "column":
        return not (name == "tsv" and obj.table.name == "kb_chunk")
    return not (type_ == "index" and name == "ix_kb_chunk_tsv")


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=[metadata, slack_metadata],
        include_object=_declared,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        compare_server_default=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or load_settings().database_url
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("opsgate migrations run online only: give a database URL")
run_migrations_online()
