"""Migrations run by hand in a test: a database taken down to an older revision."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Engine

from core.migrate import alembic_config


def downgrade(engine: Engine, revision: str) -> None:
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)
