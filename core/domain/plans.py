"""ChangePlan: the JSON-Schema contract every proposed change must meet, its one reading, and its
stable hash.

The schema file beside this module is the contract (the ``verify`` block's shapes are mirrored
in ``core/domain/verify.py``). ``parse_plan`` is the one reading of a plan:
the ``plan_ready`` guard, the approval policy, the Slack message and the executor all work from
the ``ParsedPlan`` it returns, never from the raw JSON, so what a person approves, what the policy
judges and what runs cannot differ. ``plan_problems`` is what the guard and the agent's repair
loop read.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError

from core.domain.verify import verify_problems
from core.errors import InvalidPlan
from core.strict_json import non_finite_problems, unstorable_text_problems, where

ROLLBACK_TIMEOUT_S = 60  # a rollback step's timeout_s when the plan gives none
ROLLBACK_RETRY = 0  # a rollback step's retry when the plan gives none
UNSTATED_RISK = 1.0  # a plan that does not state its risk counts as the riskiest (fail closed)

HEADER_VALUE_PATTERN = r"^(?:[\x21-\x7e](?:[\x20\x09\x21-\x7e]{0,4094}[\x21-\x7e])?)?$"
"""An HTTP field value as RFC 9110 §5.5 allows it, restricted to ASCII: visible characters, with
spaces and tabs only inside. ``http.request`` headers must match it (guard and adapter alike)."""
_HEADER_VALUE = re.compile(HEADER_VALUE_PATTERN)


class StepAction(StrEnum):
    K8S_ROLLOUT = "k8s.rollout"
    SCRIPT_EXEC = "script.exec"
    GATEWAY_FLIP = "gateway.flip"
    NOOP = "noop"
    HTTP_REQUEST = "http.request"
    MCP_CALL = "mcp.call"  # a tool of an external MCP server (core.steps.adapters.mcp_call)
    K8S_SCALE = "k8s.scale"  # a Deployment's scale subresource (core.steps.adapters.k8s_objects)
    K8S_CONFIGMAP = "k8s.configmap"  # a ConfigMap's data set back (core.steps.adapters.k8s_objects)
    FLAG_SET = "flag.set"  # an OpenFeature FeatureFlag's flag set back (…adapters.k8s_objects)


Phase = Literal["step", "rollback"]
"""Which list of the plan a step stands in: its ``steps``, or its ``rollback``."""


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan, where it stands in it (``phase``, ``index``) and how it runs: the one
    step type (the parser reads it, the plan message shows it, the executor runs it). A rollback
    step without ``timeout_s``/``retry`` has the defaults."""

    phase: Phase
    index: int
    action: StepAction
    params: Mapping[str, Any]
    timeout_s: int
    retry: int

    @property
    def label(self) -> str:
        """The step in words, e.g. "step 2 (script.exec)" or "rollback step 1 (noop)"."""
        what = "step" if self.phase == "step" else "rollback step"
        return f"{what} {self.index + 1} ({self.action})"


@dataclass(frozen=True)
class ParsedPlan:
    """A plan that met the schema, read once: everything the gate, the policy, the messages and
    the executor need. ``risk`` is ``UNSTATED_RISK`` when the plan gives no ``risk_score``."""

    title: str
    risk: float
    steps: tuple[PlanStep, ...]
    rollback: tuple[PlanStep, ...]
    verify: Mapping[str, Any]
    digest: str  # plan_hash of the JSON it was read from: what approvals are bound to

    @property
    def actions(self) -> frozenset[StepAction]:
        """Every action the plan may run, its rollback included."""
        return frozenset(step.action for step in (*self.steps, *self.rollback))

    @property
    def noop_only(self) -> bool:
        """Whether every step and every rollback step is a ``noop``."""
        return self.actions == {StepAction.NOOP}


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


def parse_plan(plan: Any) -> ParsedPlan:
    """The one reading of a ChangePlan, or ``InvalidPlan`` listing every problem."""
    parsed, problems = _read(plan)
    if parsed is None:
        raise InvalidPlan("the plan does not meet the ChangePlan schema", problems=problems)
    return parsed


def plan_problems(plan: Any) -> list[str]:
    """Every way ``plan`` breaks the contract, as short readable lines; empty when it is valid."""
    return _read(plan)[1]


def parsed_or_none(plan: ParsedPlan | Mapping[str, Any]) -> ParsedPlan | None:
    """``plan`` read (a stored plan arrives as JSON); None when it does not meet the contract,
    which every reader treats as the most cautious case. The same JSON is read once: a stored
    plan is judged on every click, and the schema's check is most of a click's work."""
    if isinstance(plan, ParsedPlan):
        return plan
    try:
        text = canonical_json(plan)
    except (TypeError, ValueError):  # not JSON (NaN, an object JSON cannot hold)
        return _read(plan)[0]
    if json.loads(text) != plan:  # JSON would change it (a key that is no string): as it is
        return _read(plan)[0]
    return _parsed_json(text)


@lru_cache(maxsize=512)
def _parsed_json(text: str) -> ParsedPlan | None:
    """The reading of the plan whose canonical JSON is ``text``, from a fresh copy of it (so
    no caller's dict is shared with what the cache keeps)."""
    return _read(json.loads(text))[0]


def _read(plan: Any) -> tuple[ParsedPlan | None, list[str]]:
    problems = [*non_finite_problems(plan, "plan"), *unstorable_text_problems(plan, "plan"),
                *_schema_problems(plan)]
    if problems:
        return None, problems
    parsed = _build(plan)
    problems = [problem for where, step in _located(parsed, plan["rollback"])
                for problem in _step_problems(where, step)]
    return (None, problems) if problems else (parsed, [])


# -- the checks ------------------------------------------------------------------------------


def _schema_problems(plan: Any) -> list[str]:
    """The schema's verdict. The ``verify`` block's lines come from ``verify_problems``, which
    names the key at fault where the schema would only say "not valid under any of the given
    schemas", and also refuses a window longer than the block's own deadline, which a schema
    cannot say."""
    errors = sorted(_validator().iter_errors(plan), key=lambda e: list(e.absolute_path))
    problems = [problem for error in errors if list(error.absolute_path)[:1] != ["verify"]
                for problem in _describe(error)]
    if isinstance(plan, Mapping) and "verify" in plan:
        schema_says = [problem for error in errors
                       if list(error.absolute_path)[:1] == ["verify"]
                       for problem in _describe(error)]
        problems += [f"plan.{line}" for line in verify_problems(plan["verify"])] or schema_says
    return problems


def _describe(error: SchemaError) -> list[str]:
    path = list(error.absolute_path)
    if error.validator == "oneOf" and path == ["rollback"]:
        return _rollback_problems(error)
    return [f"{where(path, 'plan')}: {error.message}"]


def _rollback_problems(error: SchemaError) -> list[str]:
    """The rollback's two shapes, told apart by their keys so the problem names the shape meant."""
    block = error.instance
    shapes = 'one step {"action", "params"?, "timeout_s"?, "retry"?} or {"steps": [step, ...]}'
    if not isinstance(block, Mapping):
        return [f"plan.rollback: {type(block).__name__} is not an object: give {shapes}"]
    if "action" in block and "steps" in block:
        return [f'plan.rollback: has both "action" and "steps": give {shapes}, never both']
    if "action" not in block and "steps" not in block:
        return [f'plan.rollback: give {shapes} ({{"steps": []}} when nothing needs undoing)']
    meant = 1 if "steps" in block else 0  # the index of the shape in the schema's oneOf
    return [f"{where(['rollback', *sub.relative_path], 'plan')}: {sub.message}"
            for sub in error.context or [] if sub.schema_path[0] == meant]


def _step_problems(at: str, step: PlanStep) -> Iterator[str]:
    """What the schema cannot say about one step's params, checked here so the guard refuses
    it before anyone approves (the adapter checks the same again before it sends)."""
    if step.action is StepAction.HTTP_REQUEST:
        headers = step.params.get("headers")
        if isinstance(headers, Mapping):
            for name, value in headers.items():
                if not isinstance(value, str) or not _HEADER_VALUE.match(value):
                    yield (f"{at}.params.headers.{name}: {repr(value)[:60]} is not a header "
                           "value (visible ASCII, spaces and tabs only inside, at most 4096)")


# -- building the parsed plan (only from a plan that met the schema) -------------------------


def _build(plan: Mapping[str, Any]) -> ParsedPlan:
    risk = plan.get("risk_score")
    return ParsedPlan(
        title=str(plan["title"]),
        risk=float(risk) if risk is not None else UNSTATED_RISK,
        steps=tuple(_step("step", n, raw) for n, raw in enumerate(plan["steps"])),
        rollback=tuple(_step("rollback", n, raw)
                       for n, raw in enumerate(_rollback_list(plan["rollback"]))),
        verify=copy.deepcopy(dict(plan["verify"])),
        digest=plan_hash(plan),
    )


def _rollback_list(block: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The schema's two shapes: ``{"steps": [...]}`` or one step (``action`` present)."""
    return list(block["steps"]) if "steps" in block else [block]


def _step(phase: Phase, index: int, raw: Mapping[str, Any]) -> PlanStep:
    rollback = phase == "rollback"
    return PlanStep(
        phase=phase,
        index=index,
        action=StepAction(raw["action"]),
        params=copy.deepcopy(dict(raw.get("params") or {})),
        timeout_s=int(raw.get("timeout_s", ROLLBACK_TIMEOUT_S if rollback else 0)),
        retry=int(raw.get("retry", ROLLBACK_RETRY if rollback else 0)),
    )


def _located(plan: ParsedPlan, rollback: Mapping[str, Any]) -> Iterator[tuple[str, PlanStep]]:
    """Each step with where it stands in the JSON, for problems a person can find."""
    yield from ((f"plan.steps[{n}]", step) for n, step in enumerate(plan.steps))
    where = "plan.rollback.steps[{}]" if "steps" in rollback else "plan.rollback"
    yield from ((where.format(n), step) for n, step in enumerate(plan.rollback))


# -- identity ----------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def plan_hash(plan: Any) -> str:
    """The hash an approval is bound to: sha256 of the plan's canonical JSON, with numbers as
    every store gives them back, so the stored plan hashes to its stored hash."""
    return hashlib.sha256(canonical_json(_as_stored(plan)).encode("utf-8")).hexdigest()


def _as_stored(value: Any) -> Any:
    """``value`` with the two number spellings PostgreSQL's ``jsonb`` rewrites rewritten the
    same way: a float Python writes with an exponent (``1e+16``) comes back as the exact
    integer, and ``-0.0`` as ``0.0``. Any other JSON value comes back unchanged."""
    if isinstance(value, float):
        if value == 0:
            return 0.0
        text = repr(value)
        return int(Decimal(text)) if "e+" in text else value
    if isinstance(value, Mapping):
        return {key: _as_stored(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_stored(item) for item in value]
    return value
