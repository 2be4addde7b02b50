"""``noop``: a step that changes nothing (observe-only plans, placeholder rollbacks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.steps.adapters.base import StepContext, StepOutcome, parse_params
from core.steps.words import Sentence, refused, validated


class NoopParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    note: str | None = Field(default=None, max_length=1000)


def describe(params: Mapping[str, Any]) -> Sentence:
    """The step in words: "Change nothing: <its note>"."""
    p = validated(NoopParams, params)
    if not isinstance(p, NoopParams):
        return refused("noop", p)
    return (f"Change nothing: {p.note}",) if p.note else ("Change nothing",)


class NoopAdapter:
    action = "noop"

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome:
        parsed = parse_params(NoopParams, params, self.action)
        echoed = parsed.model_dump(exclude_none=True)
        summary = f"noop: {parsed.note}" if parsed.note else "noop: nothing to do"
        return StepOutcome(ok=True, summary=summary, detail={"params": echoed})
