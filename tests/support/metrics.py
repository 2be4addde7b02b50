"""The metrics source tests configure explicitly: a stand-in table (``OPSGATE_STATIC_METRICS``)
whose values pass the template plans' metric checks. opsgate has no default table: without a
source, ``plan_ready`` refuses a plan with a metric check."""

from __future__ import annotations

import json
from typing import Any

STAND_IN_METRICS: dict[str, float] = {"http_5xx_ratio": 0.001, "error_rate": 0.001,
                                      "latency_p95_ms": 120.0, "standby_saturation": 0.3}


def with_stand_in(values: dict[str, Any]) -> dict[str, Any]:
    """Settings ``values`` with the stand-in table, unless the test names its own source."""
    if values.get("prometheus_url") or "static_metrics" in values:
        return values
    return {**values, "static_metrics": STAND_IN_METRICS}

STAND_IN_ENV: dict[str, str] = {"OPSGATE_STATIC_METRICS": json.dumps(STAND_IN_METRICS)}
"""The same table for an ``opsgate`` process's environment."""
