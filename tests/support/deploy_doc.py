"""What the tests of docs/deploy.md share: the ``sh`` blocks of one of its sections, run as a
reader runs them (bash, ``set -e``, the commands the doc names on PATH: ``opsgate`` as the image
has it, PostgreSQL's client tools), and fresh PostgreSQL databases of their own (created and
dropped on the local server) for the backup and upgrade recipes."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, make_url, text

from tests.support.processes import clean_env
from tests.support.servers import POSTGRES_URL

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
NEEDS = re.compile(r"^# needs: (?P<what>.+)$")
"""The first line of a block no test here can run (a container daemon, a cluster)."""


def sections(markdown: str | None = None) -> dict[str, list[str]]:
    """Every ``sh`` block of the doc, by the heading (any level) it sits under."""
    found: dict[str, list[str]] = {}
    heading, fence, block = "", None, None
    for line in (markdown or DOC.read_text()).splitlines():
        if fence is None and line.startswith("```"):
            fence = line.strip()
            block = [] if fence == "```sh" else None
        elif fence is not None and line.strip() == "```":
            if block is not None:
                found.setdefault(heading, []).append("\n".join(block))
            fence = block = None
        elif block is not None:
            block.append(line)
        elif fence is None and re.match(r"^#+ ", line):
            heading = line.lstrip("#").strip()
    return found


def needs(block: str) -> str | None:
    """What a block needs that no test here has (its first line says), else None."""
    found = NEEDS.match(block.splitlines()[0]) if block.strip() else None
    return found["what"] if found else None


def blocks(heading: str) -> list[str]:
    found = sections().get(heading)
    assert found, f"docs/deploy.md has no sh block under {heading!r}"
    return found


def run_blocks(heading: str, cwd: Path, replaced: Sequence[tuple[str, str]] = (),
               timeout_s: float = 300, **env: str) -> str:
    """The section's blocks, in order, by one bash, with the doc's example values ``replaced``
    by the test's own (in order); what they printed. A failing command fails the test with the
    output so far."""
    runnable = [block for block in blocks(heading) if needs(block) is None]
    assert runnable, f"docs/deploy.md, {heading!r}: every block needs something"
    script = "set -euo pipefail\n" + "\n".join(runnable)
    for example, own in replaced:
        assert example in script, f"{heading!r} no longer says {example!r}"
        script = script.replace(example, own)
    path = f"{Path(sys.executable).parent}:/usr/lib/postgresql/15/bin:/usr/bin:/bin"
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
