"""The app a command runs on: ``opened_app()`` bootstraps it from settings with what the outer
layers plug in, brings or holds its schema at head, and closes it; ``migrate_schema`` is
``opsgate migrate``'s upgrade, shared by every command that may upgrade."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from core.cli.command import EXIT_BAD_SETTINGS, EXIT_SCHEMA_BEHIND, CliError, first_line, shown

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from core.bootstrap import App, Extensions
    from core.settings import Settings

EXTENSIONS_GROUP = "opsgate.extensions"
"""The entry points naming what the outer layers (the agent, the Slack bot) plug into every
process: each a function returning ``core.bootstrap.Extensions``."""


def settings_of(args: argparse.Namespace) -> Settings:
    """The environment's settings, the plugged-in layers' with them, and ``--database-url`` when
    the command line gives one: a mistake in any stops the command before it starts."""
    from core.settings import load_settings

    return load_settings(*plugged_in().settings,
                         database_url=getattr(args, "database_url", None) or None)


def database_engine(settings: Settings) -> Engine:
    """The engine of ``settings``; an unusable URL is a settings mistake (exit 2)."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from core.db.database import make_engine

    try:
        return make_engine(settings.database_url, pool_size=settings.db_pool_size)
    except (ArgumentError, NoSuchModuleError) as exc:
        from core.redact import url_without_credentials

        url, why = url_without_credentials(settings.database_url), first_line(exc)
        raise CliError(f"invalid database URL {url!r}: {url_without_credentials(why)}; "
                       "expected a SQLAlchemy URL such as sqlite:///./opsgate.db or "
                       "postgresql+psycopg://user@host/db", exit_code=EXIT_BAD_SETTINGS) from exc


def migrate_schema(settings: Settings, engine: Engine, notes: TextIO) -> None:
    """Upgrade the database to head and say what changed on ``notes``."""
    from core.migrate import current_revision, head_revision, upgrade

    before, where = current_revision(engine), shown(settings.database_url)
    if before == head_revision():
        print(f"database {where}: already at head ({before})", file=notes, flush=True)
        return
    upgrade(settings.database_url)
    after = current_revision(engine)
    print(f"database {where}: upgraded from {before or 'an empty schema'} to head ({after})",
          file=notes, flush=True)


def ready_schema(settings: Settings, engine: Engine, notes: TextIO, *,
                 upgrade: bool = False) -> None:
    """SQLite (the embedded default) is migrated on the spot, and so is any database when
    ``upgrade`` (the demo's); any other must already be at head, since upgrading production is
    an operator's decision (`opsgate migrate`)."""
    from core.db.database import is_sqlite
    from core.migrate import current_revision, head_revision

    if upgrade or is_sqlite(engine):
        migrate_schema(settings, engine, notes)
        return
    current, head = current_revision(engine), head_revision()
    if current != head:
        found = "no opsgate schema" if current is None else f"schema revision {current}"
        raise CliError(
            f"the database {shown(settings.database_url)} has {found}, this opsgate needs "
            f"revision {head}: run `opsgate migrate` first",
            exit_code=EXIT_SCHEMA_BEHIND,
        )


def plugged_in() -> Extensions:
    """What the installed outer layers plug in (``opsgate.extensions`` entry points; the core
    never imports them); nothing when none is installed."""
    from importlib.metadata import entry_points

    from core.bootstrap import Extensions

    found = list(entry_points(group=EXTENSIONS_GROUP))
    if len(found) > 1:
        names = ", ".join(point.value for point in found)
        raise CliError(f"more than one package plugs extensions into opsgate ({names})")
    if not found:
        return Extensions()
    extensions: Extensions = found[0].load()()
    return extensions


@contextmanager
def opened_app(settings: Settings, *, plugged: bool = True, upgrade: bool = False,
               notes: TextIO | None = None) -> Iterator[App]:
    """The app of ``settings`` (with the outer layers when ``plugged``), its schema at head
    (``ready_schema``; its lines on ``notes``, stdout by default), closed on the way out."""
    from core.bootstrap import bootstrap

    app = bootstrap(settings, engine=database_engine(settings),
                    extensions=plugged_in() if plugged else None)
    try:
        ready_schema(settings, app.engine, sys.stdout if notes is None else notes,
                     upgrade=upgrade)
        yield app
    finally:
        app.close()
