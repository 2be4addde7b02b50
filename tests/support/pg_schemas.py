"""A migrated PostgreSQL schema for each test, made fast: the migrations run once per test
process into a template schema, which ``pg_dump`` writes out as SQL (tables, indexes, triggers,
functions and the rows the migrations insert, ``alembic_version`` included); each test's schema
is that SQL under a fresh name, a few hundred milliseconds where running every migration again
took seconds. Each test still has its own schema, dropped afterwards, with the search_path and
pool ``core.migrate.scratch_schema`` gives. Without a ``pg_dump`` of the server's version, every
schema is migrated as before (``scratch_schema``)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from core.db.database import make_engine, normalize_url
from core.migrate import head_revision, scratch_schema


class SchemaTemplate:
    """The template schema of one test process and its SQL, made on first use."""

    def __init__(self, url: str, prefix: str = "t") -> None:
        self.url, self.prefix = url, prefix
        self._stack = ExitStack()
        self._sql: str | None = None
        self._name = ""
        self._tried = False

    def sql(self) -> tuple[str, str] | None:
        """The template's name and SQL; None when ``pg_dump`` cannot write it."""
        if not self._tried:
            self._tried = True
            engine = self._stack.enter_context(scratch_schema(self.url, prefix="template"))
            self._name = str(engine.url.query["options"]).rsplit("=", 1)[-1]
            self._sql = _dumped(self.url, self._name)
        return None if self._sql is None else (self._name, self._sql)

    @contextmanager
    def schema(self, pool_size: int = 20) -> Iterator[Engine]:
        """A schema of the test's own at head, dropped afterwards."""
        made = self.sql()
        if made is None:
            with scratch_schema(self.url, prefix=self.prefix, pool_size=pool_size) as engine:
                yield engine
            return
        template, sql = made
        schema = f"{self.prefix}_{uuid.uuid4().hex[:12]}"
        admin = create_engine(normalize_url(self.url), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(sql.replace(template, schema))
            sep = "&" if "?" in self.url else "?"
            options = quote(f"-csearch_path={schema}", safe="")
            engine = make_engine(f"{self.url}{sep}options={options}", pool_size=pool_size)
            try:
                yield engine
            finally:
                engine.dispose()
                with admin.connect() as conn:
                    conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        finally:
            admin.dispose()

    def close(self) -> None:
        self._stack.close()


def _dumped(url: str, schema: str) -> str | None:
    """``schema`` as SQL that recreates it, rows included; None without a usable pg_dump."""
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        return None
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    done = subprocess.run([pg_dump, "--no-owner", "--no-privileges", "--inserts",
                           f"--schema={schema}", f"--dbname={libpq}"],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 or head_revision() not in done.stdout:  # e.g. an older pg_dump
        return None
    # psql's own commands (\restrict of newer pg_dumps) are no SQL.
    return "\n".join(line for line in done.stdout.splitlines() if not line.startswith("\\"))
