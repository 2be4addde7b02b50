"""What every step adapter shares: the step's context in, its outcome out, the refusal raised
when params fail validation or the allow-list (nothing ran), and param parsing."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypedDict, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from core.domain.dry_run import Verdict
from core.domain.plans import canonical_json
from core.errors import Unprocessable


@dataclass(frozen=True)
class StepContext:
    """Which step of which approved plan is running, and how long it may take."""

    case_id: str
    plan_hash: str
    step_index: int
    attempt: int
    idempotency_key: str  # stable per (case, plan hash, step index, attempt): sent downstream
    timeout_s: float

    @classmethod
    def for_step(cls, case_id: str, plan_hash: str, step_index: int, attempt: int,
                 timeout_s: float) -> StepContext:
        """A context whose idempotency key is derived from the step's identity."""
        key = step_idempotency_key(case_id, plan_hash, step_index, attempt)
        return cls(case_id, plan_hash, step_index, attempt, key, timeout_s)


def step_idempotency_key(case_id: str, plan_hash: str, step_index: int, attempt: int) -> str:
    """The key a step sends downstream: the same step attempt always sends the same key."""
    identity = canonical_json(["opsgate.step", case_id, plan_hash, step_index, attempt])
    return "opsgate-step-" + hashlib.sha256(identity.encode("utf-8")).hexdigest()[:40]


@dataclass(frozen=True)
class StepOutcome:
    """What a step did. ``ok=False`` is a result (non-zero exit, HTTP 5xx, timeout), not an
    exception: the executor records it and decides about retry and rollback."""

    ok: bool
    summary: str  # one line for the case timeline / Slack thread
    output: str = ""  # captured output, bounded, with a marker where cut
    detail: dict[str, Any] = field(default_factory=dict)  # JSON-able: exit code, status…

    def as_dict(self) -> dict[str, Any]:
        """The outcome as JSON-able data."""
        return asdict(self)

    def stored(self, duration_s: float) -> StoredOutcome:
        """The outcome as the gateway ledger stores it, with how long the step took (measured
        by the runner, so a replay reads the same duration)."""
        return {"ok": self.ok, "summary": self.summary, "output": self.output,
                "detail": copy.deepcopy(self.detail), "duration_s": duration_s}

    @staticmethod
    def from_stored(stored: object) -> tuple[StepOutcome, float]:
        """An outcome the ledger stored (``stored``'s JSON) and its duration, read back typed;
        anything else reads as a failure that said nothing."""
        found: Mapping[str, Any] = stored if isinstance(stored, Mapping) else {}
        detail = found.get("detail")
        outcome = StepOutcome(ok=bool(found.get("ok")), summary=str(found.get("summary", "")),
                              output=str(found.get("output") or ""),
                              detail=dict(detail) if isinstance(detail, Mapping) else {})
        return outcome, float(found.get("duration_s") or 0.0)


class StoredOutcome(TypedDict):
    """A step attempt's outcome in the gateway ledger (the call's stored result)."""

    ok: bool
    summary: str
    output: str
    detail: dict[str, Any]
    duration_s: float


class Adapter(Protocol):
    """Runs one ChangePlan step action."""

    action: str

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome: ...


Checked = tuple[Verdict, str]
"""A step's dry run: its verdict and the sentence that says what it read
(``core.domain.dry_run``)."""


@runtime_checkable
class DryRunnable(Protocol):
    """An adapter whose target can answer a dry run: what the step would do, read (never
    written) before anyone approves. ``StepRefused`` when the step cannot run at all."""

    action: str

    def dry_run(self, params: Mapping[str, Any]) -> Checked: ...


class StepRefused(Unprocessable):
    """The step's params fail validation or an allow-list: nothing ran."""

    code = "step_refused"


class NothingToChange(StepRefused):
    """The step's dry run found its object already as the step would set it: an empty diff.
    A step is refused for it; a rollback step is not (it undoes what the steps will change)."""

    code = "nothing_to_change"


Params = TypeVar("Params", bound=BaseModel)


def parse_params(model: type[Params], params: Mapping[str, Any], action: str) -> Params:
    """``params`` as ``model``, or ``StepRefused`` listing every problem."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        problems = [_problem(error) for error in exc.errors(include_url=False)]
        raise StepRefused(f"{action}: invalid params: {'; '.join(problems)}", action=action,
                          problems=problems) from exc


def _problem(error: ErrorDetails) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "params"
    return f"{where}: {error['msg']}"
