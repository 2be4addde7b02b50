"""Benchmark: the approval policy at one Approve click (issue 27), with 50 Cedar policies and a
catalog of 1,000 entities, against the whole click's server time.

Measured in one run, in ``--rounds`` interleaved slices so load from elsewhere falls on all alike:

- **evaluate**: ``ApprovalPolicy.at(components, now).evaluate(plan, requester, [approval])``, the
  policy's verdict on one yes (a ``k8s.rollout`` of a production component, by one of its owners);
- **slack click** (the click): a signed Slack ``block_actions`` Approve click POSTed to the
  running bot (uvicorn on 127.0.0.1 serving ``POST /slack/events``, Slack's Web API played by
  ``bot/sandbox``, SQLite file), from the POST's start until the click's work after its ack has
  finished (Bolt's lazy listener ``approve``: the approval looked up, ``approve_plan``, the case
  at EXECUTING with its ``plan_approved`` row); the policies and the catalog are files, as
  ``OPSGATE_POLICY`` and ``OPSGATE_CATALOG`` name them, and the bot's policy is the one measured;
- **core click**: ``CaseService.approve_plan`` alone on the same database and policy;
- **baseline**: the core click under the shipped default policy (no catalog, one approver named).

Each click is on a fresh case at the gate, prepared outside the timed section. Target (issue 27):
the evaluation ≤ 10% of the Slack click (``share_p50``; ``core_click_share_p50`` against
``approve_plan`` alone). ``gate_policy`` is all the policy work the gate does on that click (one
verdict, the version); ``parts_p50_us`` breaks it down. Figures last, as one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlencode, urlsplit

import yaml  # type: ignore[import-untyped]
from pydantic import SecretStr
from slack_bolt.lazy_listener.thread_runner import ThreadLazyListenerRunner
from sqlalchemy import Engine, select

from bot.app import SlackEvents, build_bolt, mount_slack_events
from bot.blocks import plan_message, short_id
from bot.cli import slack_chat
from bot.notifier import SlackNotifier
from bot.sandbox.sender import signed_headers
from bot.sandbox.server import Sandbox, create_sandbox_app
from bot.sandbox.serving import ThreadedServer, free_port
from bot.sandbox.workspace import APP_ID, BOT, BOT_ID, CHANNEL_ID, CHANNEL_NAME, TEAM_ID
from bot.settings import SlackSettings
from bot.slack_store import SlackStore
from core.api import create_api
from core.bootstrap import App, Extensions, bootstrap
from core.cases.service import CaseService
from core.catalog.descriptors import (
    KUBERNETES_ID,
    KUBERNETES_NAMESPACE,
    KUBERNETES_SELECTOR,
    SLACK_GROUP,
    SLACK_USER,
)
from core.catalog.model import Catalog, Component, Group, User
from core.db.database import make_engine
from core.db.tables import plan_approved
from core.domain.commands import ApprovePlan, OpenCase, TransitionCase
from core.domain.fsm import CaseEvent
from core.domain.plans import parsed_or_none, plan_hash, plan_problems
from core.domain.policy import Approval, ApprovalPolicy, Satisfied
from core.domain.views import CaseView
from core.migrate import upgrade_engine
from core.policy.files import catalog_problems
from core.policy.rules import REQUESTER_RULE, UNOWNED_RULE, PolicyError, Rules, read_rules
from core.settings import Settings

TARGET_SHARE = 0.10
SHORT = {"clicks": 20, "rounds": 2, "warmup": 5}

SYSTEMS = ("payments", "checkout", "search", "catalog", "identity", "orders", "shipping",
           "inventory", "pricing", "notifications", "billing", "ledger", "reporting", "ingest",
           "messaging", "media", "recommendations", "fraud", "edge", "storage")
PARTS = ("api", "worker", "db", "cache", "web", "cron", "consumer", "gateway", "scheduler",
         "exporter", "indexer", "proxy", "sync", "admin", "events")
SPECIALS = ("incident-commanders", "sre-leads", "security", "release-managers", "dba", "network",
            "contractors", "change-advisory")
TO_GATE = (CaseEvent.START_ANALYSIS, CaseEvent.ANALYSIS_DONE, CaseEvent.PLAN_READY)
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the signing secret the clicks are signed with
HOST = "127.0.0.1"
CLICK_TIMEOUT_S = 10.0


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- the catalog ------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """The generated catalog, the Slack user groups' members, and who does what on the click."""

    catalog: Catalog
    slack_members: dict[str, frozenset[str]]
    systems: tuple[str, ...]
    teams: dict[str, tuple[str, ...]]  # system -> its two owner teams
    departments: dict[str, tuple[str, ...]]  # department -> its teams
    divisions: dict[str, tuple[str, ...]]  # division -> its teams
    component: Component  # what the click's plan rolls out
    approver: str  # one of its owners (Slack id)
    requester: str  # who proposed the plan (Slack id, another team)

    def members(self, group: str) -> frozenset[str]:
        return self.slack_members.get(group, frozenset())

    def department_of(self, system: str) -> str:
        return next(d for d, teams in self.departments.items() if self.teams[system][0] in teams)

    def of_system(self, system: str) -> list[Component]:
        return [c for c in self.catalog.components.values() if c.system == system]


def build_world(entities: int) -> World:
    """About 60% components, 6% groups, 34% users (600 / 60 / 340 for 1,000): two owner teams
    per system under departments, divisions and ``engineering``, the special groups the
    policies name, and people with Slack ids in one team each (some in a special group too)."""
    systems = tuple(SYSTEMS[i % len(SYSTEMS)] + ("" if i < len(SYSTEMS) else f"-{i // 20}")
                    for i in range(max(2, round(len(SYSTEMS) * entities / 1000))))
    teams: dict[str, tuple[str, ...]] = {s: (f"{s}-oncall", f"{s}-core") for s in systems}
    n_departments = min(8, len(systems))
    n_divisions = min(3, n_departments)
    departments = {f"department-{d}": tuple(t for i, s in enumerate(systems)
                                            if i % n_departments == d for t in teams[s])
                   for d in range(n_departments)}
    divisions = {f"division-{v}": tuple(t for d, dept in enumerate(departments)
                                        if d % n_divisions == v for t in departments[dept])
                 for v in range(n_divisions)}
    parent = {t: dept for dept, ts in departments.items() for t in ts}
    parent |= {dept: f"division-{d % n_divisions}" for d, dept in enumerate(departments)}
    parent |= {div: "engineering" for div in divisions}
    all_teams = [t for s in systems for t in teams[s]]
    groups = [Group(name, (), parent.get(name), (), f"S{i:08d}" if name in all_teams else None,
                    name.replace("-", " ").title(), "bench:groups.yaml", "team")
              for i, name in enumerate((*all_teams, *departments, *divisions, "engineering",
                                        *SPECIALS))]
    n_users = round(entities * 0.34)
    n_components = entities - len(groups) - n_users
    if n_components < len(all_teams):
        raise SystemExit(f"--entities {entities} is too few for {len(all_teams)} teams")
    users = []
    for n in range(n_users):
        groups_of = [all_teams[n % len(all_teams)]]
        if n < 4 * len(SPECIALS):  # four people in each special group
            groups_of.append(SPECIALS[n % len(SPECIALS)])
        users.append(User(f"user-{n:04d}", f"U0B{n:06d}", tuple(groups_of), f"User {n}",
                          "bench:people.yaml"))
    components = []
    for n in range(n_components):
        team = all_teams[n % len(all_teams)]
        system = next(s for s in systems if team in teams[s])
        part = PARTS[(n // len(all_teams)) % len(PARTS)]
        index = n // (len(all_teams) * len(PARTS))
        name = f"{team}-{part}" + (f"-{index}" if index else "")
        lifecycle = "staging" if n % 3 == 2 else "production"
        namespace = system if lifecycle == "production" else f"{system}-staging"
        components.append(Component(name, team, lifecycle, system, name, name, namespace,
                                    (("app", name),), (), "bench:components.yaml",
                                    type="service"))
    catalog = Catalog.of(components, groups, users, sources=("bench",))
    slack_members = {g.slack_group: frozenset(catalog.members(g.name))
                     for g in groups if g.slack_group}
    # The click: a production worker of the fourth system (no tier-1, database or gateway
    # policy names it), approved by one of its owners, proposed by someone of another system,
    # neither in a special group (a contractor's yes is refused; a lead's admitted otherwise).
    system = systems[3 % len(systems)]
    component = next(c for c in components if c.system == system and c.lifecycle == "production"
                     and c.name.endswith("-worker"))
    plain = {u.slack_id for u in users if not set(u.member_of) & set(SPECIALS)}
    approver = min(catalog.members(component.owner) & plain)
    requester = min(catalog.members(teams[systems[0]][0]) & plain)
    return World(catalog, slack_members, systems, teams, departments, divisions, component,
                 approver, requester)


# -- the policies -----------------------------------------------------------------------------


def _policy(name: str, reason: str, body: str, quorum: int | None = None) -> str:
    said = f'@quorum("{quorum}")\n' if quorum is not None else ""
    return f'@id("{name}")\n@reason("{reason}")\n{said}{body};\n'


def _names(kind: str, names: Sequence[str]) -> str:
    return "[" + ", ".join(f'{kind}::"{n}"' for n in names) + "]"


def _instant(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _freeze(name: str, start: datetime, end: datetime, extra: str = "") -> str:
    return _policy(
        name, f"deploy freeze until {end:%Y-%m-%d %H:%M} UTC",
        "forbid (principal, action, resource)\n"
        f'when {{\n  context.now >= datetime("{_instant(start)}") &&\n'
        f'  context.now < datetime("{_instant(end)}") &&\n'
        f'  resource.lifecycles.contains("production"){extra}\n}}\n'
        'unless { principal in Group::"incident-commanders" }')


def build_policies(world: World, count: int, now: datetime) -> list[tuple[str, str]]:
    """``count`` policies, as (file, Cedar text) pairs: the owners, guardrails, freezes (none
    in force at ``now``: two past, two to come), automatic approval, leads, tier-1 and
    high-risk quorums, then a staging permit per department, a permit per system naming its
    department, and (beyond 50) a permit per owner team."""
    comps = list(world.catalog.components.values())
    prod = [c for c in comps if c.lifecycle == "production"]
    tier1 = [c.name for c in prod if c.name.endswith("-api")][:10]
    databases = [c.name for c in comps if c.name.endswith("-db")]
    gateways = [c.name for c in comps if c.name.endswith(("-gateway", "-proxy"))]
    ledger = [c.name for c in world.of_system(world.systems[-1])]
    day = timedelta(days=1)
    files: list[tuple[str, list[str]]] = [
        ("owners.cedar", [
            _policy("owners-approve", "the owners of the components a plan touches approve it",
                    "permit (principal, action == Action::\"approve\", resource)\n"
                    "when { principal in resource.owners }", 1),
            _policy("two-owners-from-risk-in-production",
                    "a production change from risk 0.7 needs two of its owners",
                    "permit (principal, action == Action::\"approve\", resource)\n"
                    "when {\n  principal in resource.owners &&\n"
                    '  resource.risk.greaterThanOrEqual(decimal("0.7")) &&\n'
                    '  resource.lifecycles.contains("production")\n}', 2),
        ]),
        ("guardrails.cedar", [
            _policy("no-scripts-in-production",
                    "script.exec does not run in production: use a k8s.rollout or a flag",
                    "forbid (principal, action, resource)\n"
                    'when {\n  resource.actions.contains("script.exec") &&\n'
                    '  resource.lifecycles.contains("production")\n}'),
            _policy("contractors-never-production", "contractors do not approve production",
                    'forbid (principal in Group::"contractors", action, resource)\n'
                    'when { resource.lifecycles.contains("production") }'),
            _policy("http-in-production-by-security",
                    "an http.request in production needs security's yes",
                    "forbid (principal, action, resource)\n"
                    'when {\n  resource.actions.contains("http.request") &&\n'
                    '  resource.lifecycles.contains("production")\n}\n'
                    'unless { principal in Group::"security" }'),
            _policy("database-scripts-by-dba", "a script on a database needs the DBAs",
                    "forbid (principal, action, resource)\n"
                    'when {\n  resource.actions.contains("script.exec") &&\n'
                    f'  resource.components.containsAny({_names("Component", databases)})\n}}\n'
                    'unless { principal in Group::"dba" }'),
        ]),
        ("freezes.cedar", [
            _freeze("freeze-year-end", now + 20 * day, now + 35 * day),
            _freeze("freeze-peak-sales", now + 300 * day, now + 304 * day),
            _freeze("freeze-quarter-close", now - 60 * day, now - 57 * day,
                    " &&\n  resource.components.containsAny("
                    f"{_names('Component', ledger)})"),
            _freeze("freeze-datacenter-move", now - 40 * day, now - 30 * day),
        ]),
        ("auto.cedar", [
            _policy("auto-approve-noop-in-staging", "a noop-only plan in staging approves itself",
                    'permit (principal == User::"gatekeeper", '
                    'action == Action::"auto_approve", resource)\n'
                    'when { resource.actions == ["noop"] && resource.lifecycles == ["staging"] }'),
            _policy("auto-approve-low-risk-staging-rollouts",
                    "a rollout in staging below risk 0.3 approves itself",
                    'permit (principal == User::"gatekeeper", '
                    'action == Action::"auto_approve", resource)\n'
                    'when {\n  resource.actions == ["k8s.rollout"] &&\n'
                    '  resource.lifecycles == ["staging"] &&\n'
                    '  resource.risk.lessThan(decimal("0.3"))\n}'),
        ]),
        ("leads.cedar", [
            _policy("sre-leads-below-0.7", "an SRE lead approves any plan below risk 0.7",
                    'permit (principal in Group::"sre-leads", action == Action::"approve", '
                    'resource)\nwhen { resource.risk.lessThan(decimal("0.7")) }', 1),
            _policy("sre-leads-two-from-0.7", "from risk 0.7, two SRE leads",
                    'permit (principal in Group::"sre-leads", action == Action::"approve", '
                    'resource)\nwhen { resource.risk.greaterThanOrEqual(decimal("0.7")) }', 2),
            _policy("incident-commanders-approve", "an incident commander approves below 0.9",
                    'permit (principal in Group::"incident-commanders", '
                    'action == Action::"approve", resource)\n'
                    'when { resource.risk.lessThan(decimal("0.9")) }', 1),
            _policy("release-managers-rollouts", "a release manager approves rollouts below 0.5",
                    'permit (principal in Group::"release-managers", '
                    'action == Action::"approve", resource)\n'
                    'when {\n  resource.actions == ["k8s.rollout"] &&\n'
                    '  resource.risk.lessThan(decimal("0.5"))\n}', 1),
        ]),
        ("critical.cedar", [
            _policy("tier-1-two-owners", "a tier-1 component needs two of its owners",
                    "permit (principal, action == Action::\"approve\", resource)\n"
                    "when {\n  principal in resource.owners &&\n"
                    f"  resource.components.containsAny({_names('Component', tier1)})\n}}", 2),
            _policy("change-advisory-from-0.9", "from risk 0.9 in production, three of the CAB",
                    'permit (principal in Group::"change-advisory", '
                    'action == Action::"approve", resource)\n'
                    'when {\n  resource.risk.greaterThanOrEqual(decimal("0.9")) &&\n'
                    '  resource.lifecycles.contains("production")\n}', 3),
            _policy("network-approves-gateways", "network approves changes to gateways",
                    'permit (principal in Group::"network", action == Action::"approve", '
                    f"resource)\nwhen {{ resource.components.containsAny("
                    f"{_names('Component', gateways)}) }}", 1),
        ]),
        ("divisions.cedar", [
            _policy(f"{division}-two-from-0.7", f"{division} approves its risky changes by two",
                    f'permit (principal in Group::"{division}", action == Action::"approve", '
                    "resource)\nwhen {\n"
                    f"  resource.owners.containsAny({_names('Group', teams)}) &&\n"
                    '  resource.risk.greaterThanOrEqual(decimal("0.7")) &&\n'
                    '  resource.lifecycles.contains("production")\n}', 2)
            for division, teams in world.divisions.items()]),
        ("staging.cedar", [
            _policy(f"{dept}-staging", f"{dept} approves staging changes of its teams",
                    f'permit (principal in Group::"{dept}", action == Action::"approve", '
                    'resource)\nwhen {\n  resource.lifecycles == ["staging"] &&\n'
                    f"  resource.owners.containsAny({_names('Group', teams)})\n}}", 1)
            for dept, teams in world.departments.items()]),
        ("systems.cedar", [
            _policy(f"system-{system}", f"{world.department_of(system)} approves changes to "
                    f"the {system} system below risk 0.7",
                    f'permit (principal in Group::"{world.department_of(system)}", '
                    'action == Action::"approve", resource)\nwhen {\n'
                    "  resource.components.containsAny("
                    f"{_names('Component', [c.name for c in world.of_system(system)])}) &&\n"
                    '  resource.risk.lessThan(decimal("0.7"))\n}', 1)
            for system in world.systems]),
        ("teams.cedar", [
            _policy(f"team-{team}", f"{team} approves rollouts of its components below 0.5",
                    f'permit (principal in Group::"{team}", action == Action::"approve", '
                    'resource)\nwhen {\n  resource.actions == ["k8s.rollout"] &&\n'
                    f"  resource.owners.contains(Group::\"{team}\") &&\n"
                    '  resource.risk.lessThan(decimal("0.5"))\n}', 1)
            for system in world.systems for team in world.teams[system]]),
    ]
    available = sum(len(texts) for _file, texts in files)
    if not 1 <= count <= available:
        raise SystemExit(f"--policies must be within 1..{available} for this catalog")
    sources, left = [], count
    for file, texts in files:
        if left <= 0:
            break
        sources.append((f"bench:{file}", "\n".join(texts[:left])))
        left -= len(texts[:left])
    return sources


def read_checked(sources: list[tuple[str, str]], catalog: Catalog) -> Rules:
    """The rules, as ``opsgate policy check`` would accept them: valid Cedar against the schema,
    and every group and component they name in the catalog."""
    try:
        rules = read_rules(sources)
    except PolicyError as error:
        raise SystemExit("the generated policies are invalid:\n"
                         + "\n".join(map(str, error.problems))) from None
    unknown = catalog_problems(rules, catalog)
    if unknown:
        raise SystemExit("the generated policies name unknown entities:\n"
                         + "\n".join(map(str, unknown)))
    return rules


def click_plan(component: Component) -> dict[str, Any]:
    """A valid plan rolling ``component`` back to the previous image (tests/unit/domain/
    test_policy_differential.py's ``k8s.rollout`` shape, with the ``operation`` its adapter
    needs: its dry run checks the params), risk 0.4: one owner decides."""
    def rollout(tag: str) -> dict[str, Any]:
        params = {"operation": "set-image", "namespace": component.kubernetes_namespace,
                  "deployment": component.name, "container": "app",
                  "image": f"registry.example.com/{component.name}:{tag}"}
        return {"action": "k8s.rollout", "params": params, "timeout_s": 120, "retry": 1}

    plan = {"title": f"roll {component.name} back to v41", "risk_score": 0.4,
            "steps": [rollout("v41")], "rollback": {"steps": [rollout("v42")]},
            "verify": {"metric": "error_rate", "below": 0.01, "for_s": 300}}
    problems = plan_problems(plan)
    if problems:
        raise SystemExit(f"the click's plan is invalid: {problems}")
    return plan


# -- timing -----------------------------------------------------------------------------------


@dataclass
class Figure:
    """Latencies (ms) of one operation."""

    name: str
    ms: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.ms)

    @property
    def p99(self) -> float:
        ordered = sorted(self.ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def timed(op: Callable[[], Any]) -> float:
    started = time.perf_counter_ns()
    op()
    return (time.perf_counter_ns() - started) / 1e6


@dataclass
class Clicks:
    """Cases waiting at the gate for one service, and the click on each."""

    service: CaseService
    plan: dict[str, Any]
    components: tuple[str, ...]
    requester: str
    approver: str
    waiting: list[tuple[uuid.UUID, int]] = field(default_factory=list)

    def prepare(self, count: int) -> None:
        """``count`` fresh cases at the gate, each on the plan (outside any timing)."""
        self.waiting = [self.to_gate(n) for n in range(count)][::-1]

    def to_gate(self, n: int) -> tuple[uuid.UUID, int]:
        """Case ``n`` opened and moved to the gate on the plan; its id and version there."""
        opened = self.service.open_case(
            OpenCase(title=f"bench case {n}", actor=self.requester, components=self.components),
            uuid.uuid4().hex).data()
        case_id, version = uuid.UUID(opened["case_id"]), 0
        for event in TO_GATE:
            plan = self.plan if event is CaseEvent.PLAN_READY else None
            moved = self.service.transition(
                TransitionCase(case_id, event, actor=self.requester, plan=plan),
                uuid.uuid4().hex).data()
            version = int(moved["version"])
        return case_id, version

    def click(self) -> float:
        """One Approve click, timed: the case service's whole handling of it."""
        case_id, version = self.waiting.pop()
        cmd = ApprovePlan(case_id, plan_hash(self.plan), self.approver,
                          expected_version=version)
        key = uuid.uuid4().hex
        replies: list[Any] = []
        ms = timed(lambda: replies.append(self.service.approve_plan(cmd, key)))
        reply = replies[0]
        if not reply.ok or reply.data()["approval"]["state"] != "approved":
            raise RuntimeError(f"the click did not approve: {reply.body}")
        return ms


@contextmanager
def sqlite_engine(folder: Path) -> Iterator[Engine]:
    """A migrated SQLite file database in ``folder``."""
    engine = make_engine(f"sqlite:///{folder / 'bench.db'}")
    try:
        upgrade_engine(engine)
        yield engine
    finally:
        engine.dispose()


def gate_policy_work(policy: ApprovalPolicy, components: tuple[str, ...], plan: dict[str, Any],
                     requester: str, approver: str, now: datetime) -> Callable[[], None]:
    """All the policy work the gate does on one deciding click: ``Gate.approval``'s one verdict
    on the stored plan's JSON (the permits that admitted the yes come with it,
    ``Verdict.admitted``: Cedar is asked once) and the policy set's version, for the
    ``plan_approved`` row (``decision_row``) and the ``gate_approved`` timeline row
    (``Gate._policy_facts``)."""
    approvals = [Approval(approver, plan_hash(plan))]

    def work() -> None:
        judged = policy.at(components, now)
        judged.evaluate(plan, requester, approvals)
        _ = judged.version
        _ = policy.version

    return work


def parts(policy: ApprovalPolicy, default: ApprovalPolicy, world: World, plan: dict[str, Any],
          now: datetime, n: int) -> dict[str, float]:
    """p50 (µs) of each piece of the policy's work on a click, of the gate's whole policy work,
    and of the same under the shipped default policy (``default_*``)."""
    components = (world.component.name,)
    at = policy.at(components, now)
    parsed = parsed_or_none(plan)
    assert parsed is not None, "click_plan checked it"
    subject = at.subject(parsed, world.requester)
    people = at.people()
    approvals = [Approval(world.approver, parsed.digest)]
    target = (world.component.kubernetes_namespace, world.component.name)
    ops: dict[str, Callable[[], Any]] = {
        "parse_plan": lambda: parsed_or_none(plan),
        "evaluate_parsed": lambda: at.evaluate(parsed, world.requester, approvals),
        "subject": lambda: at.subject(parsed, world.requester),
        "by_kubernetes": lambda: world.catalog.by_kubernetes(*target),
        "people": at.people,
        "rules_groups": lambda: at.cedar.named_groups,
        "groups_of": lambda: people.groups_of(world.approver),
        "judge": lambda: at.judge(subject, world.approver),
        "version": lambda: at.version,
        "gate_policy": gate_policy_work(policy, components, plan, world.requester,
                                        world.approver, now),
        "default_evaluate": lambda: default.at((), now).evaluate(plan, world.requester,
                                                                 approvals),
        "default_judge": lambda: default.judge(default.at((), now).subject(
            parsed, world.requester), world.approver),
        "default_gate_policy": gate_policy_work(default, (), plan, world.requester,
                                                world.approver, now),
    }
    return {name: round(statistics.median(timed(op) for _ in range(n)) * 1000, 1)
            for name, op in ops.items()}


# -- the click through Slack ------------------------------------------------------------------


DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's when built with it
STATIC_METRICS = {"error_rate": 0.001}  # the bot's metrics source: the plan's check passes
P = ParamSpec("P")
T = TypeVar("T")


def _present(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value not in (None, "", {})}


def descriptors(catalog: Catalog) -> list[dict[str, Any]]:
    """The catalog as the Backstage descriptors ``OPSGATE_CATALOG`` reads back."""
    api = "backstage.io/v1alpha1"
    found: list[dict[str, Any]] = []
    for c in catalog.components.values():
        selector = ",".join(f"{key}={value}" for key, value in c.kubernetes_selector)
        annotations = _present({KUBERNETES_ID: c.kubernetes_id,
                                KUBERNETES_NAMESPACE: c.kubernetes_namespace,
                                KUBERNETES_SELECTOR: selector})
        found.append({"apiVersion": api, "kind": "Component",
                      "metadata": _present({"name": c.name, "title": c.title,
                                            "annotations": annotations}),
                      "spec": _present({"type": c.type, "lifecycle": c.lifecycle,
                                        "owner": f"group:default/{c.owner}",
                                        "system": c.system})})
    for g in catalog.groups.values():
        found.append({"apiVersion": api, "kind": "Group",
                      "metadata": _present({"name": g.name, "annotations": _present(
                          {SLACK_GROUP: g.slack_group})}),
                      "spec": _present({"type": g.type, "parent": g.parent,
                                        "profile": _present({"displayName": g.display_name}),
                                        "children": list(g.children),
                                        "members": list(g.members)})})
    for u in catalog.users.values():
        found.append({"apiVersion": api, "kind": "User",
                      "metadata": _present({"name": u.name, "annotations": _present(
                          {SLACK_USER: u.slack_id})}),
                      "spec": _present({"profile": _present({"displayName": u.display_name}),
                                        "memberOf": list(u.member_of)})})
    return found


def write_world(folder: Path, world: World,
                sources: Sequence[tuple[str, str]]) -> tuple[Path, Path]:
    """The catalog (one Backstage YAML file) and the policies (.cedar files) in ``folder``:
    what ``OPSGATE_CATALOG`` and ``OPSGATE_POLICY`` name."""
    catalog, policies = folder / "catalog", folder / "policies"
    catalog.mkdir()
    policies.mkdir()
    (catalog / "catalog-info.yaml").write_text(
        yaml.dump_all(descriptors(world.catalog), Dumper=DUMPER, sort_keys=False), "utf-8")
    for name, text in sources:
        (policies / name.removeprefix("bench:")).write_text(text, "utf-8")
    return catalog, policies


def same_entities(read: Catalog, built: Catalog) -> bool:
    """Whether the catalog read from the files has the generated entities (sources aside)."""
    def plain(entities: Any) -> dict[str, Any]:
        return {name: replace(entity, source="") for name, entity in entities.items()}

    return all(plain(getattr(read, kind)) == plain(getattr(built, kind))
               for kind in ("components", "groups", "users"))


class Finishes(Executor):
    """Bolt's executor of lazy listeners, noting when each piece of work it was given started
    and finished (``perf_counter_ns``): a click's work after its ack, Bolt's own runner
    included."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.done: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        def noted() -> T:
            started = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.done.put((started, time.perf_counter_ns()))

        return self.inner.submit(noted)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait, cancel_futures=cancel_futures)


@dataclass(frozen=True)
class Bot:
    """The running bot: its App, where it serves Slack, where Slack's Web API is played, and
    when each click's work after its ack finished."""

    app: App
    url: str
    slack_url: str
    finishes: Finishes


def port_of(url: str) -> int:
    return int(urlsplit(url).port or 0)


@contextmanager
def running_bot(engine: Engine, world: World, catalog: Path, policies: Path) -> Iterator[Bot]:
    """The bot as ``opsgate serve`` runs it with Slack on (bench/slack_ack.py's): uvicorn on
    127.0.0.1 serving ``POST /slack/events`` (signature checks, Bolt), the policies and the
    catalog read from their files, Slack's Web API played by the sandbox, the Slack user
    groups' members known (as ``bot/groups.py``'s cache would have them). No relay and no
    consumers: what the click's outbox rows start (the plan message's update, the run) is not
    the click's own work."""
    api_url = f"http://{HOST}:{free_port()}"
    sandbox = Sandbox(events_url=f"{api_url}/slack/events", api_url=api_url,
                      public_url=f"http://{HOST}:{free_port()}", signing_secret=SECRET)
    slack = ThreadedServer(create_sandbox_app(sandbox), HOST, port_of(sandbox.public_url),
                           "bench-sandbox").start()
    served: list[SlackEvents] = []

    def mount(app: App, api: Any) -> None:
        served.append(SlackEvents(build_bolt(app), SECRET))
        mount_slack_events(app, api, served[-1])

    settings = Settings(policy=policies, catalog=catalog, approvers=[], directory=["catalog"],
                        static_metrics=STATIC_METRICS).with_layers(SlackSettings(
                            slack_bot_token=SecretStr(sandbox.bot_token),
                            slack_signing_secret=SecretStr(SECRET),
                            slack_api_url=sandbox.web_api_url, incident_channel=CHANNEL_ID))
    app = bootstrap(settings, engine=engine, members=world.members, extensions=Extensions(
        consumers={"notifier": SlackNotifier}, routes=(mount,), chat=slack_chat))
    server = ThreadedServer(create_api(app), HOST, port_of(api_url), "bench-bot").start()
    try:
        runner = served[0].bolt.listener_runner.lazy_listener_runner
        if not isinstance(runner, ThreadLazyListenerRunner):
            raise SystemExit(f"Bolt runs lazy listeners with {type(runner).__name__}: "
                             "the bench cannot see when a click's work ends")
        runner.executor = Finishes(runner.executor)
        yield Bot(app, api_url, sandbox.public_url, runner.executor)
    finally:
        server.stop(10)
        for events in served:  # the work still running after its ack, before Slack goes
            events.close()
        slack.stop()
        sandbox.close()
        app.close()


@dataclass(frozen=True)
class Waiting:
    """A case at the gate as Slack shows it: the plan message with its Approve button."""

    case_id: uuid.UUID
    version: int
    approval_id: str
    message: dict[str, Any]


def read_answer(conn: socket.socket) -> int:
    """The status of the HTTP response on ``conn``, read whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise RuntimeError("the bot closed the connection")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in lines[1:]
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            raise RuntimeError("the bot closed the connection")
        body += chunk
    return int(lines[0].split()[1])


@dataclass
class SlackClicks:
    """Cases waiting at the gate in the bot's database, each with its plan message, and one
    person's Approve click on each, signed and POSTed to the bot as Slack sends it."""

    bot: Bot
    cases: Clicks
    waiting: list[Waiting] = field(default_factory=list)
    acks: list[float] = field(default_factory=list)  # ms from the POST to its 200
    handed: list[float] = field(default_factory=list)  # ms from the POST to the listener's start
    conn: socket.socket | None = None
    used_at: float = 0.0

    def prepare(self, count: int) -> None:
        """``count`` fresh cases at the gate, each with the approval id and plan message the
        notifier would have posted (outside any timing). The message is drawn once (asking
        who may approve takes Cedar ~100 questions) and given each case's ids."""
        store, digest = SlackStore(self.bot.app.engine), plan_hash(self.cases.plan)
        found: list[Waiting] = []
        drawn: tuple[str, str, str] | None = None  # the first message's JSON and its two ids
        for n in range(count):
            case_id, version = self.cases.to_gate(n)
            approval_id = store.save_approval(case_id, digest, version)
            ts = f"{1_800_000_000 + n}.000200"
            store.place_approval(approval_id, CHANNEL_ID, ts)
            if drawn is None:
                case: CaseView = {**self.bot.app.cases.get_case(case_id), "version": version}
                text, blocks = plan_message(case, self.cases.plan, digest, approval_id,
                                            self.cases.requester, self.bot.app.policy)
                drawn = (json.dumps({"text": text, "blocks": blocks}), approval_id,
                         short_id(case_id))
            shown, first_approval, first_case = drawn
            message = json.loads(shown.replace(first_approval, approval_id)
                                 .replace(first_case, short_id(case_id)))
            found.append(Waiting(case_id, version, approval_id, {
                "type": "message", "ts": ts, "user": BOT.id, "bot_id": BOT_ID, "team": TEAM_ID,
                "thread_ts": f"{1_800_000_000 + n}.000100", **message}))
        self.waiting = found[::-1]

    def body(self, waiting: Waiting) -> bytes:
        """Slack's ``block_actions`` payload of the Approve button (``bot/sandbox``'s shape)."""
        block = next(b for b in waiting.message["blocks"] if b.get("type") == "actions")
        button = next(e for e in block["elements"] if e.get("value") == waiting.approval_id)
        action = {key: button[key] for key in ("type", "action_id", "text", "value", "style")
                  if key in button}
        payload: dict[str, Any] = {
            "type": "block_actions",
            "user": {"id": self.cases.approver, "username": "approver", "name": "approver",
                     "team_id": TEAM_ID},
            "api_app_id": APP_ID, "token": "sandbox",
            "team": {"id": TEAM_ID, "domain": "opsgate-sandbox"},
            "enterprise": None, "is_enterprise_install": False,
            "container": {"type": "message", "message_ts": waiting.message["ts"],
                          "channel_id": CHANNEL_ID, "is_ephemeral": False},
            "trigger_id": f"{time.time_ns()}.bench", "channel": {"id": CHANNEL_ID,
                                                                 "name": CHANNEL_NAME},
            "message": waiting.message, "state": {"values": {}},
            "response_url": f"{self.bot.slack_url}/response/bench",
            "actions": [{**action, "block_id": block.get("block_id", ""),
                         "action_ts": f"{time.time():.6f}"}],
        }
        return urlencode({"payload": json.dumps(payload)}).encode()

    def connection(self) -> socket.socket:
        """A kept-alive connection to the bot, opened again when it may have timed out."""
        if self.conn is None or time.monotonic() - self.used_at > 2.0:
            if self.conn is not None:
                self.conn.close()
            self.conn = socket.create_connection((HOST, port_of(self.bot.url)))
            self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.conn

    def click(self) -> float:
        """One Approve click, timed from the POST's start until the bot's work after the ack
        has finished (the ack's latency is kept in ``acks``)."""
        waiting = self.waiting.pop()
        body = self.body(waiting)
        head = "".join(f"{name}: {value}\r\n" for name, value in signed_headers(
            SECRET, body, "application/x-www-form-urlencoded").items())
        request = (f"POST /slack/events HTTP/1.1\r\nHost: {HOST}\r\n{head}"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        conn, done = self.connection(), self.bot.finishes.done
        while not done.empty():
            done.get_nowait()
        started = time.perf_counter_ns()
        conn.sendall(request)
        status = read_answer(conn)
        acked = time.perf_counter_ns()
        try:
            listening, finished = done.get(timeout=CLICK_TIMEOUT_S)
        except queue.Empty:
            raise RuntimeError("the click's work after its ack did not finish") from None
        self.used_at = time.monotonic()
        decided = self.decisions(waiting.case_id)
        if status != 200 or decided != [(self.cases.approver, "approved")]:
            raise RuntimeError(f"the click did not approve: HTTP {status}, decisions {decided}")
        self.acks.append((acked - started) / 1e6)
        self.handed.append((listening - started) / 1e6)
        return (finished - started) / 1e6

    def decisions(self, case_id: uuid.UUID) -> list[tuple[str, str]]:
        """The case's ``plan_approved`` rows: (approver, verdict)."""
        with self.bot.app.engine.connect() as conn:
            rows = conn.execute(select(plan_approved.c.decision)
                                .where(plan_approved.c.case_id == case_id)).scalars().all()
        return [(str(row["approver"]), str(row["verdict"])) for row in rows]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


# -- the run ----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    now = datetime.now(UTC)
    world = build_world(args.entities)
    catalog = world.catalog
    say(f"catalog: {len(catalog.components)} components, {len(catalog.groups)} groups, "
        f"{len(catalog.users)} users")
    sources = build_policies(world, args.policies, now)
    started = time.perf_counter()
    rules = read_checked(sources, catalog)
    read_s = time.perf_counter() - started
    say(f"policies: {len(rules.rules) - 1} read and checked in {read_s:.2f}s "
        f"(+ the always-on never-the-requester)")
    default = ApprovalPolicy(approvers=frozenset({world.approver}))
    plan = click_plan(world.component)
    components = (world.component.name,)
    approvals = [Approval(world.approver, plan_hash(plan))]
    n, rounds = args.clicks, max(1, min(args.rounds, args.clicks))
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="opsgate-bench-policy-") as scratch:
        folder = Path(scratch)
        catalog_dir, policy_dir = write_world(folder, world, sources)
        with sqlite_engine(folder) as engine, \
                running_bot(engine, world, catalog_dir, policy_dir) as bot:
            # The policy measured is the bot's: read from the files, as the click judges.
            policy = bot.app.policy
            if not same_entities(bot.app.catalog.current(), catalog) or \
                    len(policy.cedar.rules) != len(rules.rules):
                raise SystemExit("the bot did not read the generated catalog and policies")
            verdict = policy.at(components, now).evaluate(plan, world.requester, approvals)
            if not isinstance(verdict, Satisfied):
                raise SystemExit(f"the click's yes is not enough under the policies: {verdict}")
            say(f"bot on {bot.url}; the click: {world.approver} approves "
                f"{world.component.name} ({verdict.reason}; policies "
                f"{', '.join(verdict.policies)})")

            def evaluate() -> float:
                return timed(lambda: policy.at(components, datetime.now(UTC)).evaluate(
                    plan, world.requester, approvals))

            def clicks(service: CaseService, named: tuple[str, ...]) -> Clicks:
                return Clicks(service, plan, named, world.requester, world.approver)

            slack = SlackClicks(bot, clicks(bot.app.cases, components))
            ours = clicks(bot.app.cases, components)
            # Without a catalog a case names no component (open_case refuses unknown ones).
            base = clicks(CaseService(engine, policy=default, reads_metrics=True), ())
            say(f"preparing {3 * (n + args.warmup)} cases at the gate")
            for prepared in (slack, ours, base):
                prepared.prepare(n + args.warmup)
            ops = {"evaluate": evaluate, "slack_click": slack.click, "core_click": ours.click,
                   "baseline": base.click}
            for _ in range(args.warmup):
                for op in ops.values():
                    op()
            slack.acks.clear()
            slack.handed.clear()
            figures = {name: Figure(name, []) for name in ops}
            per_round = [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]
            for r, count in enumerate(per_round):
                for name, op in ops.items():
                    figures[name].ms.extend(op() for _ in range(count))
                say(f"round {r + 1} of {rounds}: {sum(per_round[:r + 1])} of each")
            slack.close()
            load_after = os.getloadavg()[0]
            breakdown = parts(policy, default, world, plan, now, max(n, 50))
    figures["slack_ack"] = Figure("slack_ack", slack.acks)
    figures["slack_handed"] = Figure("slack_handed", slack.handed)
    a, s, b, c = (figures[name] for name in ("evaluate", "slack_click", "core_click", "baseline"))
    for f in figures.values():
        say(f"{f.name:<11} p50 {f.p50:8.3f} ms  p99 {f.p99:8.3f} ms")
    gate_ms = breakdown["gate_policy"] / 1000
    share_p50, share_p99 = a.p50 / s.p50, a.p99 / s.p99
    ack, handed = figures["slack_ack"], figures["slack_handed"]
    return {
        "clicks": n, "rounds": rounds,
        "policies": len(set(rules.rules) - {REQUESTER_RULE, UNOWNED_RULE}),  # the operator's
        "entities": len(catalog.components) + len(catalog.groups) + len(catalog.users),
        "components": len(catalog.components), "groups": len(catalog.groups),
        "users": len(catalog.users), "policies_read_s": round(read_s, 3),
        "admitted_by": list(verdict.policies),
        "evaluate_p50_ms": round(a.p50, 3), "evaluate_p99_ms": round(a.p99, 3),
        "slack_click_p50_ms": round(s.p50, 3), "slack_click_p99_ms": round(s.p99, 3),
        "slack_ack_p50_ms": round(ack.p50, 3), "slack_ack_p99_ms": round(ack.p99, 3),
        # from the POST to the start of Bolt's lazy listener (HTTP, signature, dispatch)
        "slack_handed_p50_ms": round(handed.p50, 3), "slack_handed_p99_ms": round(handed.p99, 3),
        "core_click_p50_ms": round(b.p50, 3), "core_click_p99_ms": round(b.p99, 3),
        "baseline_click_p50_ms": round(c.p50, 3), "baseline_click_p99_ms": round(c.p99, 3),
        "share_p50": round(share_p50, 4), "share_p99": round(share_p99, 4),
        "target_share": TARGET_SHARE, "met": share_p50 <= TARGET_SHARE,
        "core_click_share_p50": round(a.p50 / b.p50, 4),
        "core_click_share_p99": round(a.p99 / b.p99, 4),
        "core_click_vs_baseline_p50": round(b.p50 / c.p50, 3),
        "core_click_vs_baseline_p99": round(b.p99 / c.p99, 3),
        "gate_policy_p50_ms": round(gate_ms, 3), "gate_share_p50": round(gate_ms / s.p50, 4),
        "default_gate_policy_p50_ms": round(breakdown["default_gate_policy"] / 1000, 3),
        # The shipped default's evaluation against its own (core) click.
        "baseline_share_p50": round(breakdown["default_evaluate"] / 1000 / c.p50, 4),
        "parts_p50_us": breakdown,
        "cpus": os.cpu_count() or 1,
        "load_avg_before": round(load_before, 2), "load_avg_after": round(load_after, 2),
    }


def print_table(result: dict[str, Any]) -> None:
    print(f"\nThe policy at one click ({result['policies']} policies, {result['entities']} "
          f"catalog entities, {result['clicks']} clicks, load average "
          f"{result['load_avg_before']:g} before, {result['load_avg_after']:g} after)")
    print(f"{'':<48}{'p50 ms':>10}{'p99 ms':>10}")
    rows = [("policy evaluation (at().evaluate())", "evaluate"),
            ("Slack click: POST to the click's work done", "slack_click"),
            ("  to the lazy listener's start", "slack_handed"),
            ("  to the POST's ack (200)", "slack_ack"),
            ("core click: approve_plan, 50 policies + catalog", "core_click"),
            ("core click: approve_plan, shipped default", "baseline_click")]
    for label, key in rows:
        print(f"{label:<48}{result[f'{key}_p50_ms']:>10.3f}{result[f'{key}_p99_ms']:>10.3f}")
    met = "met" if result["met"] else "MISSED"
    print(f"evaluation / Slack click: {result['share_p50']:.1%} p50, {result['share_p99']:.1%} "
          f"p99 (target <= {TARGET_SHARE:.0%}: {met}); all the gate's policy work "
          f"{result['gate_policy_p50_ms']:.3f} ms = {result['gate_share_p50']:.1%} of the click")
    print(f"evaluation / approve_plan alone: {result['core_click_share_p50']:.1%} p50, "
          f"{result['core_click_share_p99']:.1%} p99")
    print(f"the shipped default's evaluation / its approve_plan: "
          f"{result['baseline_share_p50']:.1%} p50; all its policy work "
          f"{result['default_gate_policy_p50_ms']:.3f} ms")
    print(f"approve_plan vs the default policy's: {result['core_click_vs_baseline_p50']:.2f}x "
          f"p50, {result['core_click_vs_baseline_p99']:.2f}x p99\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clicks", type=int, default=200,
                        help="timed clicks (and evaluations) per contender")
    parser.add_argument("--policies", type=int, default=50, help="Cedar policies")
    parser.add_argument("--entities", type=int, default=1000,
                        help="catalog entities (components, groups and users)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="interleave the contenders in this many slices")
    parser.add_argument("--warmup", type=int, default=20,
                        help="untimed clicks (and evaluations) of each contender first")
    parser.add_argument("--short", action="store_true",
                        help=f"a quick look: {SHORT['clicks']} clicks in "
                             f"{SHORT['rounds']} slices after {SHORT['warmup']}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    if args.clicks < 1 or args.warmup < 0 or args.entities < 200:
        parser.error("--clicks must be at least 1, --warmup at least 0 and --entities at "
                     "least 200")
    result = run(args)
    print_table(result)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
