"""ChangePlan: the JSON-Schema contract every proposed change must meet, and its stable hash.

The schema file beside this module is the contract; the pydantic models mirror it for typed use
(the ``verify`` block's in ``core/domain/verify.py``). ``plan_problems`` is what the
``plan_ready`` guard and the agent's repair loop read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict, Field

from core.domain.verify import verify_problems
from core.errors import InvalidPlan


class StepAction(StrEnum):
    K8S_ROLLOUT = "k8s.rollout"
    SCRIPT_EXEC = "script.exec"
    GATEWAY_FLIP = "gateway.flip"
    NOOP = "noop"
    HTTP_REQUEST = "http.request"


class PlanStep(BaseModel):
    model_config = ConfigDict(frozen=True)

    action: StepAction
    params: dict[str, Any] = Field(default_factory=dict)
    timeout_s: int = Field(ge=10)
    retry: int = Field(ge=0, le=3)


class ChangePlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    title: str = Field(min_length=1, max_length=200)
    risk_score: float | None = Field(default=None, ge=0, le=1)
    steps: list[PlanStep] = Field(min_length=1, max_length=50)
    rollback: dict[str, Any]
    verify: dict[str, Any]


@cache
def plan_schema() -> dict[str, Any]:
    """The ChangePlan JSON Schema (draft 2020-12) shipped with the package."""
    text = resources.files("core.domain").joinpath("change_plan.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> Draft202012Validator:
    schema = plan_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def plan_problems(plan: Any) -> list[str]:
    """Every way ``plan`` breaks the schema, as short readable lines; empty when it is valid.
    The ``verify`` block's lines come from ``verify_problems``, which names the key at fault
    where the schema would only say "not valid under any of the given schemas", and also
    refuses a window longer than the block's own deadline, which a schema cannot say."""
    errors = sorted(_validator().iter_errors(plan), key=lambda e: list(e.absolute_path))
    problems = [f"{_where(list(e.absolute_path))}: {e.message}" for e in errors
                if list(e.absolute_path)[:1] != ["verify"]]
    if isinstance(plan, Mapping) and "verify" in plan:
        schema_says = [f"{_where(list(e.absolute_path))}: {e.message}" for e in errors
                       if list(e.absolute_path)[:1] == ["verify"]]
        problems += [f"plan.{line}" for line in verify_problems(plan["verify"])] or schema_says
    return problems


def _where(path: list[str | int]) -> str:
    return "plan" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def parse_plan(plan: Any) -> ChangePlan:
    """A validated ChangePlan, or ``InvalidPlan`` listing every problem."""
    problems = plan_problems(plan)
    if problems:
        raise InvalidPlan("the plan does not meet the ChangePlan schema", problems=problems)
    return ChangePlan.model_validate(plan)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def plan_hash(plan: Any) -> str:
    """The hash an approval is bound to: sha256 of the plan's canonical JSON."""
    return hashlib.sha256(canonical_json(plan).encode("utf-8")).hexdigest()
