"""Where the tests find the local PostgreSQL and Redis (``OPSGATE_TEST_POSTGRES_URL``,
``OPSGATE_TEST_REDIS_URL``), and whether a missing server fails the run (CI=true) or skips."""

from __future__ import annotations

import os

POSTGRES_URL = os.environ.get("OPSGATE_TEST_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("OPSGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
