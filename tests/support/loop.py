"""Settings for a closed loop run in the test's own process: no Redis, no environment file, and
verification on a fast clock (a plan's 60 s window after the change passes in 0.6 s)."""

from __future__ import annotations

from typing import Any

from core.settings import Settings
from tests.support.cases import APPROVERS
from tests.support.metrics import with_stand_in

FAST_VERIFY: dict[str, Any] = {"verify_time_scale": 0.01, "verify_poll_s": 0.2}


def loop_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"_env_file": None, "redis_url": None, "auto_approve": "off",
                              "approvers": sorted(APPROVERS), **FAST_VERIFY, **overrides}
    return Settings(**with_stand_in(values))
