"""Where the tests find the local PostgreSQL and Redis (``OPSGATE_TEST_POSTGRES_URL``,
``OPSGATE_TEST_REDIS_URL``), and what a missing server or peer does to the run: it fails it.
Only a developer who asks for it (``OPSGATE_TEST_SKIP_MISSING=1``, named in the README) turns
that into a skip, and never under CI=true."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

POSTGRES_URL = os.environ.get("OPSGATE_TEST_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("OPSGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SKIP_MISSING = (not IN_CI
                and os.environ.get("OPSGATE_TEST_SKIP_MISSING", "").lower() in ("1", "true", "yes"))


def missing(message: str) -> NoReturn:
    """A server or peer a test needs is not there: the test fails, naming it (a skip only when
    the developer asked for one with OPSGATE_TEST_SKIP_MISSING=1)."""
    if SKIP_MISSING:
        pytest.skip(f"{message} (skipped: OPSGATE_TEST_SKIP_MISSING is set)")
    pytest.fail(f"{message} (make test starts it; OPSGATE_TEST_SKIP_MISSING=1 skips instead)",
                pytrace=False)
