"""No approval is ever recorded from a person the policy does not admit for every target the plan's
steps change (issue 40): generated catalogs (components in namespaces, owned by groups of
people), allow-list entries naming components or not, plans of Kubernetes restarts and HTTP
calls, and sequences of clicks, through the real case service on SQLite and PostgreSQL. The
test's oracle resolves targets and membership on its own, from the generated facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from core.catalog.model import Catalog, Component, Group, User
from core.db.tables import plan_approved
from core.domain.commands import ApprovePlan, OpenCase
from core.domain.fsm import CaseEvent
from core.domain.policy import ApprovalPolicy
from core.policy.rules import read_rules
from core.policy.targets import StepOwners
from tests.support.cases import PLAN, case_service, command, key

PEOPLE = [f"p{n}" for n in range(5)]
GROUPS = ["g0", "g1", "g2", "commanders"]
NAMESPACES = ["ns0", "ns1", "ns2"]
HOSTS = ["svc0", "svc1"]
POLICY = """
@id("owners-approve")
permit (principal, action == Action::"approve", resource)
when { principal in resource.owners };

@id("commanders-approve-anything")
permit (principal in Group::"commanders", action == Action::"approve", resource);
"""


def slack(person: str) -> str:
    return f"U0{person.upper()}"


@dataclass(frozen=True)
class World:
    components: tuple[tuple[str, str, str | None], ...]  # (name, owner, namespace)
    members: dict[str, tuple[str, ...]]  # group → people
    urls: tuple[tuple[str, str | None], ...]  # (prefix, component or None)
    steps: tuple[tuple[str, str, str], ...]  # ("k8s", namespace, name) | ("http", host, "")
    opener: str
    clicks: tuple[str, ...]

    def catalog(self) -> Catalog:
        components = [Component(name, owner, "production", None, None, None, namespace, (), (),
                                "gen.yaml") for name, owner, namespace in self.components]
        groups = [Group(g, self.members.get(g, ()), None, (), None, None, "gen.yaml")
                  for g in GROUPS]
        users = [User(p, slack(p), (), None, "gen.yaml") for p in PEOPLE]
        return Catalog.of(components, groups, users)

    def plan(self) -> dict[str, Any]:
        steps = []
        for kind, where, name in self.steps:
            if kind == "k8s":
                params = {"operation": "restart", "namespace": where, "deployment": name}
                steps.append({"action": "k8s.rollout", "params": params, "timeout_s": 60,
                              "retry": 0})
            else:
                steps.append({"action": "http.request", "timeout_s": 30, "retry": 0,
                              "params": {"method": "POST", "url": f"https://{where}/admin/go"}})
        return {**PLAN, "title": "generated", "risk_score": 0.1, "steps": steps,
                "rollback": {"action": "noop"}}

    # -- the oracle, from the generated facts alone -------------------------------------------

    def owners_of(self, kind: str, where: str, name: str) -> set[str] | None:
        """The owner groups of one step's target; None: nobody owns it."""
        if kind == "k8s":
            named = {o for c, o, ns in self.components if c == name and ns in (None, where)}
            living = {o for _c, o, ns in self.components if ns == where}
            return named or living or None
        entry = next((c for prefix, c in self.urls if prefix == f"https://{where}/"), None)
        owner = next((o for c, o, _ns in self.components if c == entry), None)
        return {owner} if owner else None

    def admits(self, person: str) -> bool:
        """Whether the policy admits ``person`` for every target: not the opener, every target
        owned, and they are in one of its owners or a commander."""
        if person == self.opener:
            return False
        groups = {g for g, people in self.members.items() if person in people}
        for step in self.steps:
            owners = self.owners_of(*step)
            if owners is None or not (groups & (owners | {"commanders"})):
                return False
        return True


@st.composite
def worlds(draw: st.DrawFn) -> World:
    names = draw(st.lists(st.sampled_from(["api", "web", "db", "queue"]), min_size=1,
                          max_size=4, unique=True))
    components = tuple((n, draw(st.sampled_from(GROUPS[:3])),
                        draw(st.none() | st.sampled_from(NAMESPACES))) for n in names)
    members = {g: tuple(draw(st.lists(st.sampled_from(PEOPLE), max_size=3, unique=True)))
               for g in GROUPS}
    urls = tuple((f"https://{h}/", draw(st.none() | st.sampled_from(names))) for h in HOSTS)
    step = st.one_of(
        st.tuples(st.just("k8s"), st.sampled_from(NAMESPACES),
                  st.sampled_from([*names, "ledger-writer"])),
        st.tuples(st.just("http"), st.sampled_from(HOSTS), st.just("")))
    steps = tuple(draw(st.lists(step, min_size=1, max_size=3)))
    opener = draw(st.sampled_from(PEOPLE))
    clicks = tuple(draw(st.lists(st.sampled_from(PEOPLE), min_size=1, max_size=4)))
    return World(components, members, urls, steps, opener, clicks)


def recorded(engine: Engine, case_id: UUID) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(select(plan_approved.c.decision)
                            .where(plan_approved.c.case_id == case_id)).scalars()
        return [d["approver"] for d in rows if d.get("verdict", "approved") == "approved"]


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(world=worlds())
def test_no_approval_from_anyone_not_admitted_for_every_target(engine: Engine,
                                                              world: World) -> None:
    catalog = world.catalog()
    policy = ApprovalPolicy(rules=read_rules([("generated.cedar", POLICY)]),
                            catalog=lambda: catalog,
                            step_owners=StepOwners.of(urls=[
                                f"{c}={prefix}" if c else prefix for prefix, c in world.urls]))
    service = case_service(engine, policy=policy)
    opened = service.open_case(OpenCase(title="generated", actor=slack(world.opener)), key())
    case_id = UUID(opened.data()["case_id"])
    for event_ in (CaseEvent.START_ANALYSIS, CaseEvent.ANALYSIS_DONE):
        service.transition(command(case_id, event_, actor="agent"), key()).data()
    plan = world.plan()
    proposed = service.transition(command(case_id, CaseEvent.PLAN_READY, actor="planner",
                                          plan=plan), key()).data()
    digest = str(proposed["plan_hash"])
    for person in world.clicks:
        service.approve_plan(ApprovePlan(case_id, digest, slack(person)), key())
    approvers = recorded(engine, case_id)
    event(f"recorded {len(approvers)} approval(s)")
    for approver in approvers:
        person = next(p for p in PEOPLE if slack(p) == approver)
        assert world.admits(person), (approver, world)
    admitted = [p for p in dict.fromkeys(world.clicks) if world.admits(p)]
    if admitted:  # the rule is not a wall: someone admitted who clicked is recorded
        assert slack(admitted[0]) in approvers, (admitted, approvers, world)
