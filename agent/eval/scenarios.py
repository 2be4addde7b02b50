"""The evaluation's scenarios: one JSON file each in a folder (``agent/eval/scenarios/`` ships
with opsgate). A scenario is an incident as people report it (title, severity, thread), the
metric series recorded around it, extra runbooks, past verified cases, and what a good answer
contains (``expect``) — plus, for the scripted models, the answer a good model gives (``answer``).

A file that does not fit is one line naming the file and the field (``ScenarioError``). Names
that become file names (runbooks, metrics) are plain names, and every file read stays in the
folder (a link out of it is refused): a scenario folder from elsewhere cannot make the harness
read or write anything outside it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from core.domain.plan_templates import load_template, template_names
from core.errors import OpsgateError

SHIPPED = Path(__file__).resolve().parent / "scenarios"
FAMILIES = ("rollback", "restart", "scale", "failover", "no change", "refuse")
Family = Literal["rollback", "restart", "scale", "failover", "no change", "refuse"]
MAX_SCENARIOS = 500


class ScenarioError(OpsgateError):
    """A scenario folder or file that cannot be used, in one line."""

    code = "invalid_scenario"


_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")


def plain_name(name: str) -> str:
    """``name`` when a file may be named after it: no separator, no ``..``, not absolute."""
    if not _PLAIN.fullmatch(name) or ".." in name:
        raise ValueError(f"{name!r} is not a plain name (letters, digits, '_', '.', ':', '-'; "
                         "no '/', no '\\', no '..')")
    return name


PlainName = Annotated[str, AfterValidator(plain_name)]


def within(folder: Path, path: Path) -> Path:
    """``path`` resolved (links followed), when it lies in ``folder``; else ``ScenarioError``:
    the harness reads scenario files and writes its scratch files nowhere else."""
    resolved = path.resolve()
    if not resolved.is_relative_to(folder.resolve()):
        raise ScenarioError(f"{path}: leads out of {folder} (to {resolved}); refused")
    return resolved


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Message(Strict):
    by: str = Field(min_length=1, max_length=80)
    text: str = Field(min_length=1, max_length=2000)


class Report(Strict):
    """The incident as a person wrote it."""

    title: str = Field(min_length=1, max_length=200)
    severity: Literal["SEV1", "SEV2", "SEV3", "SEV4"] = "SEV2"
    language: str = Field(default="en", pattern=r"^[a-z]{2}$")
    style: Literal["clear", "vague", "misleading", "hostile"] = "clear"
    thread: tuple[Message, ...] = ()


class Series(Strict):
    """One recorded metric: ``normal`` before the incident, ``incident`` from ``starts_s``
    (a ``step``, or a ``ramp`` reaching it at 0), ``fixed`` once the right change is made
    (default: ``normal``); ``flat`` stays ``normal`` throughout. An incident that cleared by
itself ends at ``ends_s``."""

    shape: Literal["flat", "step", "ramp"] = "step"
    normal: float
    incident: float | None = None
    fixed: float | None = None
    starts_s: int = Field(default=0, ge=-3000, le=600)
    ends_s: int | None = Field(default=None, ge=-3000, le=1800)
    noise: float = Field(default=0.02, ge=0, le=0.5)

    def value_fixed(self) -> float:
        return self.normal if self.fixed is None else self.fixed


class PastCase(Strict):
    """A verified case the library already holds."""

    title: str = Field(min_length=1, max_length=200)
    plan: str | dict[str, Any]
    finding: str | None = None
    verification: str = "the fix held"


class Cause(Strict):
    metric: str = Field(min_length=1)
    words: tuple[str, ...] = ()


class Expect(Strict):
    """What a good answer contains."""

    family: tuple[Family, ...] = Field(min_length=1)
    risk: tuple[float, float] = (0.0, 1.0)
    cause: Cause | None = None

    @field_validator("risk")
    @classmethod
    def _band(cls, band: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 <= band[0] <= band[1] <= 1.0:
            raise ValueError("risk must be [low, high] with 0 <= low <= high <= 1")
        return band


class Answer(Strict):
    """The good answer the scripted ``good`` model gives: a plan (a ``$TEMPLATE:<name>`` or a
    ChangePlan) or none (a refusal), and its findings in words."""

    plan: str | dict[str, Any] | None
    findings: str = Field(min_length=1, max_length=1000)


class Adversarial(Strict):
    kind: Literal["report_injection", "runbook_injection", "skip_approval", "lying_tool"]
    markers: tuple[str, ...] = Field(min_length=1)  # text that must never reach a plan


DNS_LABEL = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
VERSION = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$"
WHEN_S = Field(ge=-86400, le=1800)  # seconds from the incident's start


class Service(Strict):
    """The service the incident is about, as the run's catalog knows it (namespace, the
    ``service`` label of its metrics) and its Deployment in the recorded Kubernetes world, at
    ``version`` before any deploy the scenario records."""

    name: str = Field(pattern=DNS_LABEL)
    namespace: str = Field(default="prod", pattern=DNS_LABEL)
    description: str = Field(default="", max_length=300)
    version: str = Field(default="v1.0.0", pattern=VERSION)
    replicas: int = Field(default=3, ge=1, le=20)
    regions: tuple[str, ...] = ()  # where its route serves from, serving first
    max_replicas: int | None = Field(default=None, ge=1, le=1000)
    flags: str | None = Field(default=None, pattern=DNS_LABEL)  # its FeatureFlag resource


class Change(Strict):
    """A change the change intake recorded (as CI posts it to ``/changes``): a ``deploy`` of
    ``version`` (which also becomes the Deployment's newest revision when it is the service's)
    or a ``config`` change; ``summary`` is the sender's words (data, never instructions)."""

    at_s: int = WHEN_S
    kind: Literal["deploy", "config"] = "deploy"
    service: str | None = Field(default=None, pattern=DNS_LABEL)  # default: the scenario's
    version: str = Field(default="", pattern=r"^$|" + VERSION)
    summary: str = Field(min_length=1, max_length=500)
    by: str = Field(default="ci", min_length=1, max_length=80)
    target: str | None = Field(default=None, max_length=300)  # configmap/NAME, flag/KEY…
    before: Any = None  # its value before, as the sender would post it
    after: Any = None


class Pod(Strict):
    """One pod of the service's current revision (the rest run healthy): its restarts and why
    its container last ended (``OOMKilled``, ``Error``), and whether it is backing off now."""

    restarts: int = Field(default=0, ge=0, le=1000)
    last_ended: Literal["OOMKilled", "Error", "Completed"] | None = None
    backing_off: bool = False


class KubeEvent(Strict):
    """An event about the service's Deployment, or its ``pod``-th pod."""

    at_s: int = WHEN_S
    type: Literal["Normal", "Warning"] = "Warning"
    reason: str = Field(pattern=r"^[A-Za-z]{1,60}$")
    message: str = Field(min_length=1, max_length=1000)
    pod: int | None = Field(default=None, ge=0, le=19)
    count: int = Field(default=1, ge=1, le=10_000)


class LogLine(Strict):
    at_s: int = WHEN_S
    text: str = Field(min_length=1, max_length=2000)


class Kubernetes(Strict):
    """What the recorded Kubernetes world shows beyond the Deployment and its revisions."""

    pods: tuple[Pod, ...] = Field(default=(), max_length=20)
    events: tuple[KubeEvent, ...] = Field(default=(), max_length=50)
    logs: tuple[LogLine, ...] = Field(default=(), max_length=200)  # the first pod's


class Alert(Strict):
    """An alert Alertmanager holds for the service: firing from ``starts_s``, resolved at
    ``ends_s`` when given."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,79}$")
    severity: Literal["critical", "warning", "info"] = "warning"
    summary: str = Field(min_length=1, max_length=500)
    starts_s: int = WHEN_S
    ends_s: int | None = Field(default=None, ge=-86400, le=1800)


class Scenario(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    report: Report
    series: dict[PlainName, Series] = Field(min_length=1)  # a metric's recorded file is named so
    service: Service | None = None
    changes: tuple[Change, ...] = Field(default=(), max_length=50)
    kubernetes: Kubernetes | None = None
    alerts: tuple[Alert, ...] = Field(default=(), max_length=50)
    runbooks: tuple[PlainName, ...] = ()
    past_cases: tuple[PastCase, ...] = ()
    expect: Expect
    answer: Answer
    adversarial: Adversarial | None = None

    @model_validator(mode="after")
    def _world_needs_a_service(self) -> Scenario:
        if self.service is None and (self.kubernetes is not None or self.alerts or any(
                change.service is None for change in self.changes)):
            raise ValueError("kubernetes, alerts and changes without their own service need "
                             "the scenario's service")
        pods = self.kubernetes.pods if self.kubernetes else ()
        if self.service is not None and len(pods) > self.service.replicas:
            raise ValueError(f"kubernetes.pods: {len(pods)} pods, more than the service's "
                             f"{self.service.replicas} replicas")
        return self

    def answer_plan(self) -> dict[str, Any] | None:
        return resolve_plan(self.answer.plan)


def resolve_plan(ref: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """A plan reference: ``$TEMPLATE:<name>`` is the catalog plan, a dict is itself."""
    if ref is None or isinstance(ref, dict):
        return ref
    name = ref.removeprefix("$TEMPLATE:")
    if not ref.startswith("$TEMPLATE:") or name not in template_names():
        raise ValueError(f"{ref!r} is not $TEMPLATE:<one of {', '.join(template_names())}>")
    return load_template(name)


def load_scenario(path: Path) -> Scenario:
    """One scenario file, checked; ``ScenarioError`` names the file and the field."""
    try:
        raw = json.loads(path.read_text("utf-8"))
        scenario = Scenario.model_validate(raw)
        resolve_plan(scenario.answer.plan)
        for past in scenario.past_cases:
            resolve_plan(past.plan)
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{path}: not JSON: {exc.msg} at line {exc.lineno}") from exc
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top)"
        raise ScenarioError(f"{path}: {where}: {first['msg']}") from exc
    except ValueError as exc:
        raise ScenarioError(f"{path}: {exc}") from exc
    if scenario.name != path.stem:
        raise ScenarioError(f"{path}: name {scenario.name!r} must match the file name")
    return scenario


def load_scenarios(folder: Path = SHIPPED) -> list[Scenario]:
    """Every ``*.json`` of ``folder``, sorted by name; at least one."""
    if not folder.is_dir():
        raise ScenarioError(f"--scenarios {folder}: not a folder of scenario *.json files")
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise ScenarioError(f"--scenarios {folder}: holds no scenario *.json files")
    if len(paths) > MAX_SCENARIOS:
        raise ScenarioError(f"--scenarios {folder}: {len(paths)} files, at most {MAX_SCENARIOS}")
    scenarios = []
    for path in paths:
        within(folder, path)
        scenario = load_scenario(path)
        for n, name in enumerate(scenario.runbooks):  # each there before any run starts
            try:
                runbook_file(folder, name)
            except ScenarioError as exc:
                raise ScenarioError(f"{path}: runbooks.{n}: {exc.message}") from exc
        scenarios.append(scenario)
    return scenarios


def runbook_file(folder: Path, name: str) -> Path:
    """A scenario's extra runbook: ``<scenarios>/runbooks/<name>.md``, a file in the folder
    (resolved: a link out of it is refused)."""
    try:
        path = folder / "runbooks" / f"{plain_name(name)}.md"
    except ValueError as exc:
        raise ScenarioError(f"runbook {exc}") from exc
    if not path.is_file():
        raise ScenarioError(f"runbook {name!r}: no file {path} (scenario runbooks live in "
                            f"{folder / 'runbooks'})")
    return within(folder, path)
