"""Fixtures the bot's tests share: one database world per test, SQLite alone or PostgreSQL with
the gateway's Redis under a key prefix of the test's own."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.servers import REDIS_URL


@pytest.fixture(params=["sqlite", "postgres+redis"])
def world(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The engine and the settings of one database: PostgreSQL runs with the gateway's Redis."""
    if request.param == "sqlite":
        return {"engine": request.getfixturevalue("sqlite_engine"), "redis_url": None}
    prefix = request.getfixturevalue("redis_prefix")
    return {"engine": request.getfixturevalue("pg_engine"), "redis_url": REDIS_URL,
            "gateway_key_prefix": f"{prefix}gw:"}
