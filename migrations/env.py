"""Alembic environment: one migration history for SQLite and PostgreSQL.

The URL comes from the caller's config (``opsgate migrate`` sets it from settings) or from
``OPSGATE_DATABASE_URL``. SQLite runs in batch mode so ALTERs work there too.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from core.db.database import make_engine
from core.db.tables import metadata
from core.settings import load_settings

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
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
