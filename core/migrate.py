"""Schema upgrades through alembic, from code: ``opsgate migrate`` and the tests call this."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, text

from core.db.database import make_engine, normalize_url


def migrations_dir() -> Path:
    """The migration scripts: the repo's ``migrations/`` or the copy packed into the wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "migrations", here / "_migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError("opsgate's migrations folder is missing from this installation")


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision``."""
    command.upgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    """The revision the code expects: the head of the migration scripts."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The revision the database at ``engine`` is at; None for an empty database."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_engine(engine: Engine, revision: str = "head") -> None:
    """Upgrade through an existing engine (keeps its connection options, e.g. a test schema)."""
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


@contextmanager
def scratch_schema(url: str, *, prefix: str = "scratch", pool_size: int = 8,
                   search_path_after: str | None = None) -> Iterator[Engine]:
    """A migrated PostgreSQL schema of its own (tests, benchmarks), dropped afterwards. Its
    engine's search_path is that schema alone, then ``search_path_after`` when given (e.g.
    ``public``, where an extension such as pgvector put its types)."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    search_path = schema if search_path_after is None else f"{schema},{search_path_after}"
    admin = create_engine(normalize_url(url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        sep = "&" if "?" in url else "?"
        options = quote(f"-csearch_path={search_path}", safe="")
        engine = make_engine(f"{url}{sep}options={options}", pool_size=pool_size)
        try:
            upgrade_engine(engine)
            yield engine
        finally:
            engine.dispose()
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()
