"""Where the tests find the local PostgreSQL and Redis (``OPSGATE_TEST_POSTGRES_URL``,
``OPSGATE_TEST_REDIS_URL``), and what a missing server or peer does to the run: it fails it,
locally as under CI=true; nothing turns that into a skip."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

POSTGRES_URL = os.environ.get("OPSGATE_TEST_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("OPSGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def missing(message: str) -> NoReturn:
    """A server or peer a test needs is not there: the test fails, naming it."""
    pytest.fail(f"{message} (make test starts it)", pytrace=False)
