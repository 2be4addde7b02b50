"""The approval policy's rules as Cedar reads them: ``.cedar`` texts parsed by Cedar's own engine
(cedarpy), each policy named by its ``@id`` and counted by its ``@quorum``, checked against
opsgate's Cedar schema, and one version (the hash of the texts) that approvals record.

Pure: no file is read here (``core.policy.files`` reads ``OPSGATE_POLICY``); ``default_rules``
renders the shipped default policy from today's settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from functools import cache, cached_property
from importlib import resources
from string import Template
from typing import Any, Literal

import cedarpy

from core.errors import OpsgateError

APPROVERS_GROUP = "opsgate-approvers"
"""The group the default policy admits: the people and Slack user groups of OPSGATE_APPROVERS."""
REQUESTER_RULE = "never-the-requester"
UNOWNED_RULE = "unowned-target"
"""The always-on forbid of a plan with a step no catalog component owns (``always.cedar``)."""
RISK_PLACES = Decimal("0.0001")  # Cedar's decimals carry four places

Effect = Literal["permit", "forbid"]


@dataclass(frozen=True)
class PolicyProblem:
    """One thing wrong with a policy file, as one line: the file, the policy, what is wrong."""

    source: str
    policy: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}: policy {self.policy}" if self.policy else self.source
        return f"{where}: {' '.join(self.message.split())}"


class PolicyError(OpsgateError):
    """Policies that cannot decide: every problem, each one line (``str`` is the first)."""

    code = "policy_invalid"

    def __init__(self, problems: Sequence[PolicyProblem]) -> None:
        self.problems = tuple(problems)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{problems[0]}{more}")


@dataclass(frozen=True)
class Rule:
    """One policy of the set: its name (``@id``, else ``file#n``), effect, quorum (``@quorum``,
    1 unless a permit asks for more), ``@reason`` words and who its scope names."""

    name: str
    effect: Effect
    quorum: int
    reason: str | None
    source: str
    principal: tuple[str, str | None]  # the scope's operator and entity, e.g. ("in", 'Group::"x"')
    actions: frozenset[str]  # the actions its scope names; empty: every action
    names: frozenset[tuple[str, str]] = frozenset()  # every (type, id) entity it names
    on_owners: bool = False  # whether it reads ``resource.owners``


@dataclass(frozen=True)
class Rules:
    """A parsed policy set: its rules by name, Cedar's handle, its texts and its version."""

    rules: Mapping[str, Rule]
    texts: tuple[tuple[str, str], ...]  # (source, Cedar text)
    default: bool = False  # the shipped default, rendered from the settings
    handle: cedarpy.PolicySet = field(repr=False, compare=False, default=None)  # type: ignore

    @cached_property
    def version(self) -> str:
        """The hash of the policies' texts (12 hex digits): what an approval row records."""
        digest = hashlib.sha256()
        for source, text in self.texts:
            digest.update(f"{source}\0{text}\0".encode())
        return digest.hexdigest()[:12]

    def named(self, names: Sequence[str]) -> tuple[Rule, ...]:
        return tuple(self.rules[name] for name in names if name in self.rules)

    @cached_property
    def named_groups(self) -> frozenset[str]:
        """Every group a rule names (catalog groups, Slack user groups)."""
        return frozenset(name for rule in self.rules.values() for kind, name in rule.names
                         if kind == "Group")



BROKEN_RULE = "policy-files-broken"


def refusing_rules() -> Rules:
    """What decides while the policy files have a problem: nobody approves and nothing approves
    itself (fail closed: the broken file could be a forbid)."""
    return read_rules([("opsgate:broken.cedar", _shipped("broken.cedar"))], refusing=True)


def read_rules(sources: Sequence[tuple[str, str]], *, default: bool = False,
               refusing: bool = False) -> Rules:
    """The rules of ``sources`` ((name, Cedar text) pairs) and the always-on rules;
    ``PolicyError`` naming every problem (syntax, schema, names, quorums)."""
    texts = (*sources, ("opsgate:always.cedar", _shipped("always.cedar")))
    problems: list[PolicyProblem] = []
    policies: dict[str, Any] = {}
    rules: dict[str, Rule] = {}
    for source, text in texts:
        for name, est, problem in _policies_of(source, text, set(rules)):
            if problem is not None:
                problems.append(problem)
                continue
            rule, problem = _rule(source, name, est)
            if problem is not None:
                problems.append(problem)
            policies[name], rules[name] = est, rule
    if not problems and not any(rule.effect == "permit" for rule in rules.values()) \
            and not (default or refusing):
        problems.append(PolicyProblem(texts[0][0] if sources else "OPSGATE_POLICY", None,
                                      "no permit: nobody could ever approve a plan"))
    if problems:
        raise PolicyError(problems)
    return Rules(rules, tuple(texts), default, _handle(policies))


def default_rules(*, two_person_risk: float, auto_approve: str,
                  auto_approve_max_risk: float) -> Rules:
    """The shipped default policy for today's settings: ``OPSGATE_APPROVERS`` (the members of
    ``Group::"opsgate-approvers"``), one approver below ``two_person_risk`` and two from it,
    and automatic approval of noop-only plans (``noop_only``) and of risk below
    ``auto_approve_max_risk`` too (``low_risk``)."""
    numbers = {"two_person_risk": cedar_decimal(two_person_risk),
               "auto_approve_max_risk": cedar_decimal(auto_approve_max_risk)}
    parts = ["default.cedar"]
    if auto_approve in ("noop_only", "low_risk"):
        parts.append("auto_noop.cedar")
    if auto_approve == "low_risk":
        parts.append("auto_low_risk.cedar")
    text = "".join(Template(_shipped(part)).substitute(numbers) for part in parts)
    return read_rules([("opsgate:default.cedar", text)], default=True)


def cedar_decimal(value: float) -> str:
    """``value`` as a Cedar decimal, rounded down to Cedar's four places. Rounding down keeps
    every comparison with a bound of four places or fewer exactly as the float compares."""
    return str(Decimal(repr(float(value))).quantize(RISK_PLACES, rounding=ROUND_FLOOR))


@cache
def schema() -> cedarpy.Schema:
    """opsgate's Cedar schema (``core/policy/opsgate.cedarschema``)."""
    return cedarpy.Schema.from_str(_shipped("opsgate.cedarschema"))


def schema_text() -> str:
    return _shipped("opsgate.cedarschema")


def _shipped(name: str) -> str:
    return resources.files("core.policy").joinpath(name).read_text("utf-8")


def _policies_of(source: str, text: str, taken: set[str]
                 ) -> list[tuple[str, Any, PolicyProblem | None]]:
    """Each policy of one file with its name, or the file's problem (syntax, schema)."""
    try:
        parsed = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as exc:
        return [("", None, PolicyProblem(source, None, f"not Cedar: {_first_line(exc)}"))]
    if parsed.get("templates"):
        return [("", None, PolicyProblem(source, None,
                                         "templates (?principal, ?resource) are not supported"))]
    invalid = _schema_problems(source, text)
    found: list[tuple[str, Any, PolicyProblem | None]] = []
    for index, (cedar_id, est) in enumerate(parsed.get("staticPolicies", {}).items()):
        name = str(est.get("annotations", {}).get("id") or f"{source}#{index + 1}")
        problem = invalid.get(cedar_id)
        if problem is None and name in taken:
            problem = f"@id({name!r}) names two policies; each name must be unique"
        taken.add(name)
        found.append((name, est, PolicyProblem(source, name, problem) if problem else None))
    return found


def _schema_problems(source: str, text: str) -> dict[str, str]:
    """Cedar's validation of one file against the schema: its message by Cedar's policy id."""
    result = cedarpy.validate_policies(text, schema())
    problems: dict[str, str] = {}
    for error in result.errors:
        message = error.error.removeprefix(f"for policy `{error.policy_id}`, ")
        problems.setdefault(error.policy_id, message)
    return problems


def _rule(source: str, name: str, est: Mapping[str, Any]) -> tuple[Rule, PolicyProblem | None]:
    annotations = est.get("annotations", {})
    effect: Effect = "permit" if est["effect"] == "permit" else "forbid"
    quorum, problem = _quorum(annotations.get("quorum"), effect)
    principal = est.get("principal", {})
    entity = principal.get("entity")
    scope = (str(principal.get("op")),
             None if entity is None else f'{entity["type"]}::{json.dumps(entity["id"])}')
    action = est.get("action", {})
    named = action.get("entities") or ([action["entity"]] if "entity" in action else [])
    rule = Rule(name, effect, quorum, annotations.get("reason"), source, scope,
                frozenset(str(a["id"]) for a in named), frozenset(_entities_in(est)),
                '"attr": "owners"' in json.dumps(est))
    return rule, (PolicyProblem(source, name, problem) if problem else None)


def _quorum(said: str | None, effect: Effect) -> tuple[int, str | None]:
    if said is None:
        return 1, None
    if effect == "forbid":
        return 1, "@quorum on a forbid means nothing; put it on a permit"
    if not (said.isascii() and said.isdigit()) or not 1 <= int(said) <= 20:
        return 1, f"@quorum({said!r}) must be a whole number of people from 1 to 20"
    return int(said), None


def _handle(policies: Mapping[str, Any]) -> cedarpy.PolicySet:
    body = {"staticPolicies": dict(policies), "templates": {}, "templateLinks": []}
    return cedarpy.PolicySet.from_json_str(json.dumps(body))


def _entities_in(node: Any) -> Iterator[tuple[str, str]]:
    """Every entity a policy's JSON form names, as (type, id)."""
    if isinstance(node, dict):
        if isinstance(node.get("type"), str) and isinstance(node.get("id"), str):
            yield node["type"], node["id"]
        for value in node.values():
            yield from _entities_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from _entities_in(value)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
