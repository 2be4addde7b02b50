"""``opsgate migrate``: the schema upgrade an operator runs before serving PostgreSQL."""

from __future__ import annotations

import argparse
import sys

from core.cli.app import database_engine, migrate_schema, settings_of
from core.cli.command import Command, database_option


def run_migrate(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    engine = database_engine(settings)
    try:
        migrate_schema(settings, engine, sys.stdout)
    finally:
        engine.dispose()
    return 0


COMMANDS = (
    Command(
        name="migrate",
        summary="upgrade the database schema to the latest revision",
        description="Run the alembic migrations up to head on the configured database "
                    "(SQLite or PostgreSQL) and print the revision before and after.",
        add_arguments=database_option,
        run=run_migrate,
    ),
)
