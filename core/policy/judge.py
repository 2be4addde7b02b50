"""One question to Cedar: may this person (or the gatekeeper) approve this plan now? Each step's
target becomes a ``Plan`` entity (the plan's risk, actions and requesters; the components that
target is, their owners and lifecycles, whether nobody owns it), the person a ``User`` whose
parents are every group they are in (catalog groups and their ancestors, Slack user groups,
``opsgate-approvers``); a person may approve only when Cedar admits them for every target, and
its answers name the permits that admitted them or the forbids that refused them.

Pure: the catalog and the Slack group members are read from memory.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import cedarpy

from core.catalog.model import Catalog, Component
from core.domain.plans import UNSTATED_RISK, ParsedPlan
from core.policy.rules import APPROVERS_GROUP, Rules, cedar_decimal
from core.policy.targets import Target

GATEKEEPER = "gatekeeper"  # core.domain.policy.AUTO_APPROVER: it only ever asks auto_approve
ANYONE = "opsgate:anyone"
"""The probe of "who may approve, how many": a member of one group at a time (never a person,
never asked about a real yes)."""

GroupMembers = Callable[[str], Collection[str]]
"""A user group id → its members' user ids. Called inside the case's transaction, so it must
answer from memory (the Slack front end keeps a cache of ``usergroups.users.list``)."""

SLACK_GROUP = re.compile(r"^S[A-Z0-9]{2,}$")


def is_slack_group(name: str) -> bool:
    """Whether ``name`` is a Slack user group id (``S0614TZR7``) rather than a catalog name."""
    return SLACK_GROUP.match(name) is not None


@dataclass(frozen=True)
class Judgement:
    """Cedar's answer for one person and one plan: allowed or not, the permits that admitted
    them (and the highest quorum among those), the forbids that refused them."""

    allowed: bool
    permits: tuple[str, ...]
    forbids: tuple[str, ...]
    quorum: int
    errors: tuple[str, ...] = ()
    refused_on: tuple[Target, ...] = ()  # the steps' targets they were not admitted for


@dataclass(frozen=True)
class People:
    """Who is in which group: the catalog, the Slack user groups (cached members) and the
    approver list of ``OPSGATE_APPROVERS`` (people and Slack user groups)."""

    catalog: Catalog
    members: GroupMembers
    approvers: frozenset[str] = frozenset()
    named_groups: frozenset[str] = frozenset()  # groups the rules name (Slack ones: S…)

    def groups_of(self, person: str) -> frozenset[str]:
        """Every group ``person`` is in, ancestors included."""
        slack_groups, linked = _slack_index(self.catalog, self.approvers, self.named_groups)
        slack = {group for group in slack_groups if person in self.members(group)}
        groups = set(self.catalog.groups_of(person)) | slack
        for group in slack:
            for name in linked.get(group, ()):
                groups |= {name, *self._ancestors(name)}
        groups.discard(APPROVERS_GROUP)  # OPSGATE_APPROVERS' alone, whatever a catalog says
        if person in self.approvers or slack & self.approvers:
            groups.add(APPROVERS_GROUP)
        return frozenset(groups)

    def everyone(self) -> frozenset[str]:
        """Everybody the directory knows by Slack id: the people who could be asked."""
        people = {user.slack_id for user in self.catalog.users.values() if user.slack_id}
        people |= {a for a in self.approvers if not a.startswith("S")}
        for group in self._slack_groups():
            people |= set(self.members(group))
        return frozenset(people)


    def _slack_groups(self) -> frozenset[str]:
        return _slack_index(self.catalog, self.approvers, self.named_groups)[0]

    def lineage(self, group: str) -> frozenset[str]:
        """The groups a member of ``group`` is in too: its ancestors, and the catalog groups
        that name it as their Slack user group (with theirs)."""
        linked = {name for name, g in self.catalog.groups.items() if g.slack_group == group}
        found = set(linked) | self._ancestors(group)
        for name in linked:
            found |= self._ancestors(name)
        return frozenset(found)

    def _ancestors(self, group: str) -> set[str]:
        seen: set[str] = set()
        todo = [group]
        while todo:
            for parent in self.catalog.parents(todo.pop()):
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return seen


@lru_cache(maxsize=64)
def _slack_index(catalog: Catalog, approvers: frozenset[str], named: frozenset[str]
                 ) -> tuple[frozenset[str], Mapping[str, frozenset[str]]]:
    """The Slack user groups that count (on the approver list, named by a policy, or a catalog
    group's), and the catalog groups each one is: computed once per catalog and policies."""
    listed = {a for a in (*approvers, *named) if a.startswith("S")}
    linked: dict[str, set[str]] = {}
    for name, group in catalog.groups.items():
        if group.slack_group:
            linked.setdefault(group.slack_group, set()).add(name)
    return frozenset(listed | set(linked)), {k: frozenset(v) for k, v in linked.items()}


@dataclass(frozen=True)
class Subject:
    """What a decision is about: the plan, who proposed it (``requester``) and everyone else
    who asked for it (``requesters``: the case's opener, whoever an agent or token acted for),
    what each of its steps changes, and when. ``catalog_decides`` when a catalog is
    configured: a step it cannot place is then unowned, and nobody approves the plan."""

    plan: ParsedPlan
    requester: str
    targets: tuple[Target, ...]
    now: datetime
    requesters: tuple[str, ...] = ()
    catalog_decides: bool = True

    @property
    def asked(self) -> tuple[str, ...]:
        """Everyone the "never the requester" rule refuses, each once."""
        return tuple(dict.fromkeys(r for r in (self.requester, *self.requesters) if r))

    @property
    def components(self) -> tuple[Component, ...]:
        """Every component the plan's steps change, each once."""
        found = {c.name: c for target in self.targets for c in target.components}
        return tuple(found.values())

    @property
    def owners(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.owner for c in self.components))

    @property
    def lifecycles(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.lifecycle for c in self.components))

    @property
    def unowned(self) -> tuple[Target, ...]:
        """The steps nobody owns, while a catalog decides (without one nothing is owned, and
        the approver list decides as it always did)."""
        return tuple(t for t in self.targets if t.unowned) if self.catalog_decides else ()

    def judged(self) -> tuple[Target | None, ...]:
        """What Cedar is asked about, one request each: every target (a person must be admitted
        for all of them), or the plan as a whole when no step changes anything."""
        return self.targets or (None,)

    def on(self, target: Target) -> Subject:
        """This subject narrowed to one of its targets."""
        return replace(self, targets=(target,))


def judge(rules: Rules, people: People, subject: Subject, person: str) -> Judgement:
    """Whether ``person`` may approve ``subject``'s plan (the gatekeeper: approve it
    automatically) — admitted for every step's target —, which rules said so, and the targets
    they were refused on."""
    action = "auto_approve" if person == GATEKEEPER else "approve"
    parents = people.groups_of(person) if person != GATEKEEPER else frozenset()
    answers = _ask(rules.handle, subject, person, parents, action)
    named: set[str] = set()
    refused_on: list[Target] = []
    quorum = 1
    for target, answer in zip(subject.judged(), answers, strict=True):
        named |= set(answer.diagnostics.reasons)
        if answer.allowed:
            quorum = max(quorum, max((rules.rules[n].quorum for n in answer.diagnostics.reasons
                                      if rules.rules[n].effect == "permit"), default=1))
        elif target is not None:
            refused_on.append(target)
    allowed = all(answer.allowed for answer in answers)
    permits = tuple(n for n, rule in rules.rules.items() if n in named and rule.effect == "permit")
    forbids = tuple(n for n, rule in rules.rules.items() if n in named and rule.effect == "forbid")
    errors = tuple(str(e) for answer in answers for e in answer.diagnostics.errors)
    return Judgement(allowed, permits if allowed else (), forbids, quorum if allowed else 1,
                     errors, tuple(refused_on))


@dataclass(frozen=True)
class Quorum:
    """Who may approve a plan before anyone said yes: ``needed`` distinct people (the highest
    quorum among the permits that admit someone now, 1 when none does), ``who`` (the groups
    and people named whose members the policies admit now, for every target) and those
    ``permits``."""

    needed: int
    permits: tuple[str, ...]
    who: tuple[str, ...]


def quorum_for(rules: Rules, people: People, subject: Subject) -> Quorum:
    """Ask Cedar, for each group the policies name or that owns what the plan touches (and each
    person a policy names), whether a member may approve the plan now, for every target:
    forbids included, so a freeze leaves only those it exempts."""
    admitted: dict[str, None] = {}
    who: list[str] = []
    probes = list(_probes(rules, people, subject))
    answers = _ask_all(rules, subject, probes)
    per_probe = len(subject.judged())
    for n, (name, _probe, _parents) in enumerate(probes):
        mine = answers[n * per_probe:(n + 1) * per_probe]
        if all(answer.allowed for answer in mine):
            who.append(name)
            for answer in mine:
                admitted.update(dict.fromkeys(answer.diagnostics.reasons))
    permits = tuple(n for n, rule in rules.rules.items()
                    if n in admitted and rule.effect == "permit")
    return Quorum(max((rules.rules[n].quorum for n in permits), default=1), permits,
                  tuple(who))


def _probes(rules: Rules, people: People, subject: Subject
            ) -> Iterator[tuple[str, str, frozenset[str]]]:
    """(name, principal, groups) of each member Cedar is asked about: a member of one group
    (and its ancestors), or a person a policy names, with their own groups."""
    groups = dict.fromkeys([*sorted(rules.named_groups), *subject.owners])
    if rules.default:
        groups[APPROVERS_GROUP] = None
    for group in groups:
        yield group, f"{ANYONE}:{group}", frozenset({group, *people.lineage(group)})
    named = sorted({name for rule in rules.rules.values() for kind, name in rule.names
                    if kind == "User" and name != GATEKEEPER})
    for person in named:
        if person not in subject.asked:
            yield person, person, people.groups_of(person)


def who_may(rules: Rules, people: People, subject: Subject) -> tuple[str, ...]:
    """The people the directory knows who may approve the plan now (never a requester)."""
    candidates = sorted(people.everyone() - set(subject.asked))
    return tuple(p for p in candidates if judge(rules, people, subject, p).allowed)


def _ask(policies: cedarpy.PolicySet, subject: Subject, person: str,
         parents: Iterable[str], action: str) -> list[cedarpy.AuthzResult]:
    """Cedar's answer for ``person`` on each target of the plan, in one batch."""
    context = {"now": {"__extn": {"fn": "datetime", "arg": _instant(subject.now)}}}
    requests = [{"principal": _uid("User", person), "action": _uid("Action", action),
                 "resource": _uid("Plan", _plan_id(subject, n)), "context": context}
                for n, _target in enumerate(subject.judged())]
    entities = [_user(person, parents), *_plans(subject)]
    return cedarpy.is_authorized_batch(requests, policies, json.dumps(entities))


def _ask_all(rules: Rules, subject: Subject,
             probes: Sequence[tuple[str, str, frozenset[str]]]) -> list[cedarpy.AuthzResult]:
    """Cedar's answers for every probe on every target at once (probe by probe, target by
    target): one batch over one set of entities."""
    if not probes:
        return []
    now = {"now": {"__extn": {"fn": "datetime", "arg": _instant(subject.now)}}}
    requests = [{"principal": _uid("User", probe), "action": _uid("Action", "approve"),
                 "resource": _uid("Plan", _plan_id(subject, n)), "context": now}
                for _name, probe, _parents in probes
                for n, _target in enumerate(subject.judged())]
    users = {probe: _user(probe, parents) for _name, probe, parents in probes}
    entities = [*users.values(), *_plans(subject)]
    return cedarpy.is_authorized_batch(requests, rules.handle, json.dumps(entities))


def _plan_id(subject: Subject, n: int) -> str:
    """The id of the ``Plan`` entity judged for target ``n``: the plan hash, then ``#n``."""
    return subject.plan.digest if n == 0 else f"{subject.plan.digest}#{n}"


def _plans(subject: Subject) -> list[dict[str, Any]]:
    """One ``Plan`` entity per target (the whole plan's risk, actions and requesters; that
    target's components, owners and lifecycles), and the components they name."""
    plan = subject.plan
    common = {
        "risk": {"__extn": {"fn": "decimal", "arg": cedar_decimal(_risk(plan))}},
        "actions": sorted(str(action) for action in plan.actions),
        "requester": _ref("User", subject.requester),
        "requesters": [_ref("User", person) for person in subject.asked],
    }
    found: list[dict[str, Any]] = []
    components: dict[str, Component] = {}
    for n, target in enumerate(subject.judged()):
        touched = target.components if target is not None else ()
        components.update((c.name, c) for c in touched)
        attrs = {**common,
                 "components": [_ref("Component", c.name) for c in touched],
                 "owners": [_ref("Group", o) for o in dict.fromkeys(c.owner for c in touched)],
                 "lifecycles": list(dict.fromkeys(c.lifecycle for c in touched)),
                 "unowned": bool(target is not None and target in subject.unowned)}
        found.append({"uid": {"type": "Plan", "id": _plan_id(subject, n)}, "attrs": attrs,
                      "parents": []})
    return [*found, *map(_component, components.values())]


def _risk(plan: ParsedPlan) -> float:
    """The plan's risk, failing closed: not a number within 0..1 counts as the riskiest."""
    risk = plan.risk
    return risk if math.isfinite(risk) and 0 <= risk <= 1 else UNSTATED_RISK


def _component(component: Component) -> dict[str, Any]:
    attrs: dict[str, Any] = {"owner": _ref("Group", component.owner),
                             "lifecycle": component.lifecycle}
    if component.system:
        attrs["system"] = component.system
    return {"uid": {"type": "Component", "id": component.name}, "attrs": attrs, "parents": []}


def _user(person: str, parents: Iterable[str]) -> dict[str, Any]:
    return {"uid": {"type": "User", "id": person}, "attrs": {},
            "parents": [{"type": "Group", "id": group} for group in sorted(parents)]}


def _ref(kind: str, name: str) -> dict[str, Any]:
    return {"__entity": _uid(kind, name)}


def _uid(kind: str, name: str) -> dict[str, str]:
    """An entity id as Cedar's JSON form names it: any text is an id as it is (no escaping),
    and Cedar reads it without its parser (a third of a request's cost in the string form)."""
    return {"type": kind, "id": name}


def _instant(now: datetime) -> str:
    moment = now.astimezone(UTC) if now.tzinfo else now.replace(tzinfo=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def sequence_words(names: Sequence[str]) -> str:
    """Names as people list them: "a", "a and b", "a, b and c"."""
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"
