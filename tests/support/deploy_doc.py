"""What the tests of docs/deploy.md share: the ``sh`` blocks of one of its sections that the page
marks as run by a test (``tests/support/docs.py`` reads the page), run as a reader runs them
(bash, ``set -e``, ``.venv/bin/opsgate``, PostgreSQL's client tools on PATH), and fresh
PostgreSQL databases of their own (created and dropped on the local server) for the backup and
upgrade recipes."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, make_url, text

from tests.support.docs import Block, page_blocks, reader_path, replace
from tests.support.processes import clean_env
from tests.support.servers import POSTGRES_URL

ROOT = Path(__file__).resolve().parents[2]
PAGE = "docs/deploy.md"
DOC = ROOT / PAGE


def sections() -> dict[str, list[Block]]:
    """Every shell block of the page, by the heading (any level) it sits under."""
    found: dict[str, list[Block]] = {}
    for block in page_blocks(PAGE):
        found.setdefault(block.heading, []).append(block)
    return found


def needs(block: Block) -> str | None:
    """What a block needs that no test here has (its ``not run`` marker names no test), else
    None."""
    return block.not_run if block.not_run is not None and block.run_by is None else None


def blocks(heading: str) -> list[Block]:
    found = sections().get(heading)
    assert found, f"docs/deploy.md has no sh block under {heading!r}"
    return found


def run_blocks(heading: str, cwd: Path, replaced: Sequence[tuple[str, str]] = (),
               timeout_s: float = 300, **env: str) -> str:
    """The section's blocks that a test runs its own way, in order, by one bash in ``cwd`` (with
    the checkout's ``.venv`` there, as the page writes ``.venv/bin/opsgate``), with the page's
    example values ``replaced`` by the test's own (in order); what they printed. A failing
    command fails the test with the output so far."""
    runnable = [block.text for block in blocks(heading) if needs(block) is None]
    assert runnable, f"docs/deploy.md, {heading!r}: every block needs something"
    script = replace("set -euo pipefail\n" + "\n".join(runnable), replaced, PAGE)
    if not (cwd / ".venv").exists():
        (cwd / ".venv").symlink_to(ROOT / ".venv")
    path = f"/usr/lib/postgresql/15/bin:{reader_path()}"
    result = subprocess.run(["bash", "-c", script], cwd=cwd, env=clean_env(PATH=path, **env),
                            capture_output=True, text=True, timeout=timeout_s, check=False)
    assert result.returncode == 0, (f"docs/deploy.md, {heading!r} failed:\n{result.stdout}\n"
                                    f"{result.stderr}")
    return result.stdout + result.stderr


@dataclass(frozen=True)
class Database:
    """A database of its own on the local PostgreSQL."""

    name: str

    @property
    def url(self) -> str:
        """As the doc writes it, and as opsgate and pg_dump both read it."""
        found = make_url(POSTGRES_URL).set(drivername="postgresql", database=self.name)
        return found.render_as_string(hide_password=False)

    def engine(self) -> Engine:
        return create_engine(make_url(self.url).set(drivername="postgresql+psycopg"))


@contextmanager
def fresh_database(admin: Engine, label: str) -> Iterator[Database]:
    database = Database(f"opsgate_{label}_{uuid.uuid4().hex[:8]}")
    with admin.connect() as conn:
        conn.execute(text(f'create database "{database.name}"'))
    try:
        yield database
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'drop database if exists "{database.name}" with (force)'))


KEPT = {"ops_case": "id", "case_timeline": "id", "tool_call_ledger": "key", "outbox": "id",
        "inbox": "consumer, message_id", "plan_proposed": "1", "plan_approved": "1"}
"""The tables a restore or an upgrade must keep row for row, and their order."""


Rows = dict[str, list[dict[str, object]]]


def contents(database: Database, columns: Rows | None = None) -> Rows:
    """Every row of the kept tables, in order; only the columns ``columns`` had, when given (an
    upgrade may add some)."""
    engine = database.engine()
    try:
        with engine.connect() as conn:
            found = {table: [dict(row) for row in conn.execute(
                text(f"select * from {table} order by {order}")).mappings()]
                for table, order in KEPT.items()}
    finally:
        engine.dispose()
    if columns is None:
        return found
    return {table: [{name: row[name] for name in (columns[table][0] if columns[table] else row)}
                    for row in rows] for table, rows in found.items()}
