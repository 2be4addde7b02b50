"""A ChangePlan's ``verify`` block: the shapes the verifier accepts, the window after the change
it must hold for and the block's deadline, and why a block could never be judged. Pure: the
verifier (``core/consumers/verifier.py``) takes the readings; the ``plan_ready`` guard refuses
what this module cannot parse, so no one approves a plan whose success cannot be told.

Accepted shapes (``change_plan.schema.json`` says the same; a test feeds both one set of examples):

    {"metric": "<PromQL or name>", "below"?: number, "above"?: number, "for_s"?: s, "timeout_s"?: s}
        at least one bound; comparisons are strict. With several series the worst one counts
        (the highest for ``below``, the lowest for ``above``). With ``for_s`` the condition must
        hold for that long after the change: the worst value over the window counts.
    {"probe": {"url": "<allow-listed URL>", "expect_status"?: [int, ...]}, "timeout_s"?: s}
        a GET after the change; passes on an expected status (any 2xx when none is named).
    {"checks": [<metric or probe check, without timeout_s>, ...], "timeout_s"?: s}
        every check must hold in the same reading.

A metric check read from Prometheus must also be a query opsgate sends (``query_problems``:
bounded ranges and steps, one named metric per selector, the case's scope) that selects the series
of one of the case's components (their metric labels): ``vector(0)`` or an unscoped selector
measures nothing of the service and is refused before the gate.

``timeout_s`` is the block's deadline, counted from the end of the change: until then the
verifier keeps reading; its default is the longest ``for_s`` plus ``DEFAULT_GRACE_S``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from core.domain.promql import Labels, QueryBounds, check_component_query
from core.errors import InvalidPlan

DEFAULT_GRACE_S = 600
"""How long past its window a block without ``timeout_s`` may take to start holding."""

NO_METRICS_SOURCE = ("no metrics source is configured (set OPSGATE_PROMETHEUS_URL to your "
                     "Prometheus, or OPSGATE_STATIC_METRICS to a stand-in table: JSON, "
                     "metric name → number)")
"""Why a metric check cannot be read, and how to configure a source, in one line."""

MAX_SECONDS = 86400

Path = tuple[str | int, ...]
Problem = tuple[Path, str]


def _whole(value: Any) -> Any:
    # JSON Schema counts 300.0 as an integer; so do we (and nothing else that is not an int).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Seconds = Annotated[int, BeforeValidator(_whole), Field(ge=1, le=MAX_SECONDS)]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        # The schema has no nulls: a key is given with a value or left out.
        if isinstance(data, Mapping):
            nulls = sorted(str(k) for k, v in data.items() if v is None)
            if nulls:
                raise ValueError(f"{', '.join(nulls)}: null is not a value; leave the key out")
        return data


class MetricCheck(_Shape):
    metric: str = Field(min_length=1, max_length=2000)
    below: float | None = None
    above: float | None = None
    for_s: Seconds | None = None

    @model_validator(mode="after")
    def _has_bound(self) -> MetricCheck:
        if self.below is None and self.above is None:
            raise ValueError("a metric check needs 'below' or 'above'")
        return self

    def window_s(self, scale: float = 1.0) -> float:
        """How long after the change the condition must hold (0: judged on one reading)."""
        return (self.for_s or 0) * scale

    def bounds(self) -> str:
        """``below 1``, ``above 2``, ``below 10 and above 2``."""
        return " and ".join(f"{name} {limit:g}" for name, limit in
                            (("below", self.below), ("above", self.above)) if limit is not None)

    def condition(self, scale: float = 1.0) -> str:
        """What must hold, in words: ``checkout_p95 below 1 for 300s after the change``."""
        held = f" for {self.window_s(scale):g}s after the change" if self.for_s else ""
        return f"{self.metric} {self.bounds()}{held}"


class ProbeTarget(_Shape):
    url: str = Field(min_length=1, max_length=2048)
    expect_status: list[Annotated[int, BeforeValidator(_whole), Field(ge=100, le=599)]] | None = (
        Field(default=None, min_length=1, max_length=20))


class ProbeCheck(_Shape):
    probe: ProbeTarget

    def condition(self, scale: float = 1.0) -> str:
        expected = self.probe.expect_status
        answer = "2xx" if expected is None else " or ".join(map(str, expected))
        return f"probe {self.probe.url} answering {answer}"


class MetricBlock(MetricCheck):
    timeout_s: Seconds | None = None


class ProbeBlock(ProbeCheck):
    timeout_s: Seconds | None = None


class ChecksBlock(_Shape):
    checks: list[Any] = Field(min_length=1, max_length=20)
    timeout_s: Seconds | None = None


Check = MetricCheck | ProbeCheck


@dataclass(frozen=True)
class VerifyBlock:
    """A parsed ``verify`` block: its checks (one for a single-check block) and deadline."""

    checks: tuple[Check, ...]
    timeout_s: int | None = None
    listed: bool = False  # written as {"checks": [...]}, however many

    @property
    def reads_metrics(self) -> bool:
        """Whether a check reads a metric (a metrics source must be configured to judge it)."""
        return any(isinstance(check, MetricCheck) for check in self.checks)

    @property
    def window_s(self) -> int:
        """How long after the change the slowest check must hold (0: judged at once)."""
        return max((c.for_s or 0 for c in self.checks if isinstance(c, MetricCheck)), default=0)

    def describe(self, scale: float = 1.0) -> str:
        """What must hold, in words, every check joined."""
        return "; ".join(check.condition(scale) for check in self.checks)

    def wait_s(self, *, scale: float = 1.0, max_wait_s: float | None = None) -> float:
        """How long after the change the verifier keeps reading: ``timeout_s``, else the window
        and ``DEFAULT_GRACE_S``; times ``scale`` (the demo's fast clock), at most
        ``max_wait_s``."""
        wait = (self.timeout_s or self.window_s + DEFAULT_GRACE_S) * scale
        return wait if max_wait_s is None else min(wait, max_wait_s)

    def deadline(self, since: datetime, *, scale: float = 1.0,
                 max_wait_s: float | None = None) -> datetime:
        """The last moment a reading may still pass, for a change that finished at ``since``."""
        return since + timedelta(seconds=self.wait_s(scale=scale, max_wait_s=max_wait_s))


def parse_verify(block: Any) -> VerifyBlock:
    """``block`` as a ``VerifyBlock``, or ``InvalidPlan`` listing every problem."""
    parsed, problems = _parse(block)
    if parsed is None or problems:
        raise InvalidPlan("the verify block cannot be judged",
                          problems=[_line("verify", p) for p in problems])
    return parsed


def verify_problems(block: Any) -> list[str]:
    """Why ``block`` could never be judged, one line each (``verify.checks[0].below: …``);
    empty when the verifier can judge it."""
    return [_line("verify", problem) for problem in _parse(block)[1]]


def query_problems(block: VerifyBlock, bounds: QueryBounds, scope: str | None,
                   components: Sequence[Labels]) -> list[str]:
    """Why a metric check's query would not be sent to Prometheus (``core/domain/promql.py``),
    one line each (``verify.checks[1].metric: refused: …``); empty when every one would be. Each
    must select the series of one of the case's ``components`` (their metric labels): a check
    that reads no series of the component measures nothing."""
    found = []
    for n, check in enumerate(block.checks):
        if isinstance(check, MetricCheck):
            verdict, _labels = check_component_query(check.metric, bounds, scope, components)
            if not verdict.allowed:
                where = f"verify.checks[{n}].metric" if block.listed else "verify.metric"
                found.append(f"{where}: {verdict.reason}")
    return found


def problem_lines(block: Any) -> list[str]:
    """The problems of ``block`` located inside it (``checks[0].below: …``), for a verdict."""
    return [_line("", problem) for problem in _parse(block)[1]]


def _parse(block: Any) -> tuple[VerifyBlock | None, list[Problem]]:
    if not isinstance(block, Mapping):
        return None, [((), f"the verify block must be an object, not {type(block).__name__}")]
    if "checks" in block:
        return _checks(block)
    if "metric" in block or "probe" in block:
        single, problems = _model(MetricBlock if "metric" in block else ProbeBlock, block, ())
        if single is None:
            return None, problems
        assert isinstance(single, MetricBlock | ProbeBlock)
        return _with_deadline(VerifyBlock((single,), single.timeout_s), ())
    return None, [((), "expected 'metric', 'probe' or 'checks'; "
                       f"got {sorted(map(str, block))}")]


def _checks(block: Mapping[str, Any]) -> tuple[VerifyBlock | None, list[Problem]]:
    shape, problems = _model(ChecksBlock, block, ())
    if shape is None:
        return None, problems
    assert isinstance(shape, ChecksBlock)
    checks: list[Check] = []
    for n, item in enumerate(shape.checks):
        check, found = _check(item, ("checks", n))
        problems += found
        if check is not None:
            checks.append(check)
    if problems:
        return None, problems
    return _with_deadline(VerifyBlock(tuple(checks), shape.timeout_s, listed=True), ("checks",))


def _check(item: Any, where: Path) -> tuple[Check | None, list[Problem]]:
    if not isinstance(item, Mapping):
        return None, [(where, f"a check must be an object, not {type(item).__name__}")]
    if "metric" in item:
        metric, problems = _model(MetricCheck, item, where)
        return (metric if isinstance(metric, MetricCheck) else None), problems
    if "probe" in item:
        probe, problems = _model(ProbeCheck, item, where)
        return (probe if isinstance(probe, ProbeCheck) else None), problems
    return None, [(where, f"expected 'metric' or 'probe'; got {sorted(map(str, item))}")]


def _with_deadline(parsed: VerifyBlock, checks_at: Path,
                   ) -> tuple[VerifyBlock | None, list[Problem]]:
    """A window longer than the block's own deadline could never hold in time."""
    if parsed.timeout_s is None:
        return parsed, []
    problems: list[Problem] = []
    for n, check in enumerate(parsed.checks):
        if isinstance(check, MetricCheck) and (check.for_s or 0) > parsed.timeout_s:
            where = (*checks_at, n, "for_s") if checks_at else ("for_s",)
            problems.append((where, f"{check.for_s}s is longer than the block's timeout_s "
                                    f"{parsed.timeout_s}s: it could never hold for its window "
                                    "before the deadline"))
    return (None, problems) if problems else (parsed, [])


def _model(model: type[_Shape], data: Mapping[str, Any], where: Path,
           ) -> tuple[_Shape | None, list[Problem]]:
    nulls = _nulls(data, where)
    if nulls:
        return None, nulls
    try:
        return model.model_validate(dict(data)), []
    except ValidationError as exc:
        return None, [((*where, *error["loc"]), _message(model, error))
                      for error in exc.errors(include_url=False)]


def _nulls(data: Mapping[str, Any], where: Path) -> list[Problem]:
    found: list[Problem] = []
    for name, value in data.items():
        if value is None:
            found.append(((*where, str(name)), "null is not a value; leave the key out"))
        elif isinstance(value, Mapping):
            found += _nulls(value, (*where, str(name)))
    return found


def _message(model: type[_Shape], error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return f"unknown key; expected {', '.join(_fields_at(model, error['loc'][:-1]))}"
    if error["type"] in ("model_type", "dict_type"):
        return "should be an object"
    return str(error["msg"]).removeprefix("Value error, ")


def _fields_at(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The keys the (nested) shape at ``path`` takes: what an unknown key should have been."""
    for part in path:
        nested = model.model_fields[str(part)].annotation if part in model.model_fields else None
        if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
            break
        model = nested
    return list(model.model_fields)


def _line(root: str, problem: Problem) -> str:
    path, message = problem
    where = _where(root, path)
    return f"{where}: {message}" if where else message


def _where(root: str, path: Sequence[str | int]) -> str:
    text = root
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
