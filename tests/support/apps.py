"""The app a test runs on: the composition root on the test's own database, built from explicit
settings only (no environment file, no Redis, no Prometheus, the stand-in metrics table, the
tests' approvers) unless the test names others. ``tests/conftest.py``'s ``app`` fixture builds it
from the ``app_options`` a module gives."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from core.bootstrap import App, Extensions, bootstrap
from core.chat import ChatSink
from core.settings import Settings
from tests.support.cases import APPROVERS
from tests.support.metrics import with_stand_in

ON_POSTGRES = pytest.mark.parametrize("engine", ["postgres"], indirect=True)
"""Runs a test whose ``app`` (or ``engine``) needs PostgreSQL on PostgreSQL only."""


def make_app(engine: Engine, *, chat: ChatSink | None = None,
             extensions: Extensions | None = None, **settings: Any) -> App:
    """The composition root on ``engine``; ``settings`` override the defaults above."""
    values: dict[str, Any] = {"_env_file": None, "redis_url": None, "prometheus_url": None,
                              "approvers": sorted(APPROVERS), **settings}
    return bootstrap(Settings(**with_stand_in(values)), engine=engine, chat=chat,
                     extensions=extensions)
