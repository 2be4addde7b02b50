"""Step adapters: one module per ChangePlan step action, one interface (``base``), all built
from settings by ``adapters_from_settings``."""

from __future__ import annotations

from core.steps.adapters.base import (
    Adapter,
    StepContext,
    StepOutcome,
    StepRefused,
    step_idempotency_key,
)
from core.steps.adapters.registry import adapters_from_settings

__all__ = [
    "Adapter",
    "StepContext",
    "StepOutcome",
    "StepRefused",
    "adapters_from_settings",
    "step_idempotency_key",
]
