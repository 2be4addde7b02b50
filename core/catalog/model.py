"""The service catalog as read: components, the groups that own them and the people in those
groups, and the questions the gate and the investigator ask of it. Pure: no files, no I/O."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

# Labels a Kubernetes workload carries for the app it runs, in the selector of a component.
APP_LABELS = ("app", "app.kubernetes.io/name")


@dataclass(frozen=True)
class Link:
    """A runbook, a dashboard: a link of a component (``metadata.links``)."""

    url: str
    title: str
    type: str | None


@dataclass(frozen=True)
class Component:
    """A piece of software someone owns (``kind: Component``), and where it runs in Kubernetes."""

    name: str
    owner: str
    lifecycle: str
    system: str | None
    title: str | None
    kubernetes_id: str | None
    kubernetes_namespace: str | None
    kubernetes_selector: tuple[tuple[str, str], ...]
    links: tuple[Link, ...]
    source: str
    description: str | None = None
    type: str | None = None
    metric_labels: tuple[tuple[str, str], ...] = ()  # opsgate.dev/metric-labels
    remedy: tuple[tuple[str, str], ...] = ()  # opsgate.dev/{max-replicas,regions,route,flags}

    def remedy_annotation(self, key: str) -> str | None:
        """The component's ``opsgate.dev/<key>`` remedy annotation as written (None: absent)."""
        return dict(self.remedy).get(key)

    @property
    def workload(self) -> str:
        """The name its Kubernetes objects go by: the kubernetes-id, else its own name."""
        return self.kubernetes_id or self.name

    def lives_in(self, namespace: str) -> bool:
        """Whether it runs in ``namespace``: a component without the annotation runs in any."""
        return self.kubernetes_namespace in (None, namespace)

    def runs_as(self, namespace: str | None, name: str) -> bool:
        """Whether the Kubernetes object ``namespace/name`` is this component's."""
        if namespace is not None and not self.lives_in(namespace):
            return False
        apps = {value for key, value in self.kubernetes_selector if key in APP_LABELS}
        return name == self.workload or name in apps


@dataclass(frozen=True)
class Group:
    """A team (``kind: Group``): its people, its place among the groups, its Slack user group."""

    name: str
    members: tuple[str, ...]
    parent: str | None
    children: tuple[str, ...]
    slack_group: str | None
    display_name: str | None
    source: str
    type: str | None = None


@dataclass(frozen=True)
class User:
    """A person (``kind: User``): their Slack id and the groups they say they are in."""

    name: str
    slack_id: str | None
    member_of: tuple[str, ...]
    display_name: str | None
    source: str

    @property
    def called(self) -> str:
        """How a person is named in a sentence: "Alice Example (U0ALICE)"."""
        shown = self.display_name or self.name
        return f"{shown} ({self.slack_id})" if self.slack_id else f"{shown} (no Slack id)"


@dataclass(frozen=True)
class Catalog:
    """Every component, group and user, by name; ``version`` names the content, so two catalogs
    with the same entities have the same version whatever their files' order or layout."""

    components: Mapping[str, Component] = field(hash=False)
    groups: Mapping[str, Group] = field(hash=False)
    users: Mapping[str, User] = field(hash=False)
    version: str
    sources: tuple[str, ...]
    ignored: int = 0  # entities of other kinds (System, API, Resource, Location…)

    EMPTY: ClassVar[Catalog]

    @classmethod
    def of(cls, components: Iterable[Component], groups: Iterable[Group],
           users: Iterable[User], sources: Iterable[str] = (), ignored: int = 0) -> Catalog:
        """The catalog of these entities, each name once, with its version computed."""
        by_name = (_by_name(components), _by_name(groups), _by_name(users))
        return cls(*by_name, version=version_of(*by_name), sources=tuple(sources),
                   ignored=ignored)

    def component(self, name: str) -> Component | None:
        return self.components.get(name)

    def user_by_slack_id(self, slack_id: str) -> User | None:
        return self._users_by_slack_id.get(slack_id)

    def groups_of(self, slack_id: str) -> frozenset[str]:
        """The groups the person is in (either side says so) and every group above those."""
        user = self.user_by_slack_id(slack_id)
        if user is None:
            return frozenset()
        return _reached(self._direct_groups.get(user.name, frozenset()), self.parents)

    def members(self, group: str) -> frozenset[str]:
        """Slack ids of the group's people and of its descendant groups' people."""
        return frozenset(user.slack_id for user in self.users_in(group) if user.slack_id)

    def users_in(self, group: str) -> tuple[User, ...]:
        """The group's people and its descendant groups' people, by name, Slack id or not."""
        below = _reached({group}, self.children) if group in self.groups else frozenset()
        return tuple(user for user in self.users.values()
                     if self._direct_groups.get(user.name, frozenset()) & below)

    def parents(self, group: str) -> frozenset[str]:
        """Direct parents: the group's ``spec.parent`` and the groups naming it a child."""
        return self._parents.get(group, frozenset())

    def children(self, group: str) -> frozenset[str]:
        """Direct children: the group's ``spec.children`` and the groups naming it their parent."""
        return self._children.get(group, frozenset())

    def by_kubernetes(self, namespace: str | None, name: str) -> tuple[Component, ...]:
        """The components a Kubernetes object such as deployment ``payments/payments-api`` is."""
        return tuple(c for c in self._by_workload.get(name, ()) if c.runs_as(namespace, name))

    @cached_property
    def _by_workload(self) -> Mapping[str, tuple[Component, ...]]:
        """Components by the names their Kubernetes objects may have (id, or app labels)."""
        found: dict[str, list[Component]] = {}
        for component in self.components.values():
            apps = {v for k, v in component.kubernetes_selector if k in APP_LABELS}
            for name in {component.workload, *apps}:
                found.setdefault(name, []).append(component)
        return {name: tuple(components) for name, components in found.items()}

    def by_labels(self, labels: Mapping[str, str]) -> tuple[Component, ...]:
        """The components an alert's labels name: ``service`` or ``job`` (narrowed by its
        ``namespace``), else the one component living in its ``namespace``."""
        namespace = labels.get("namespace")
        for label in ("service", "job"):
            value = labels.get(label)
            found = tuple(c for c in self.components.values()
                          if value in (c.name, c.kubernetes_id)
                          and (namespace is None or c.lives_in(namespace))) if value else ()
            if found:
                return found
        living = tuple(c for c in self.components.values()
                       if namespace and c.kubernetes_namespace == namespace)
        return living if len(living) == 1 else ()

    def resolve(self, names: Iterable[str]) -> tuple[tuple[Component, ...], tuple[str, ...]]:
        """The named components the catalog knows, and the names it does not (each once)."""
        asked = tuple(dict.fromkeys(names))
        known = tuple(c for c in map(self.components.get, asked) if c is not None)
        return known, tuple(name for name in asked if name not in self.components)

    @cached_property
    def _users_by_slack_id(self) -> Mapping[str, User]:
        return {user.slack_id: user for user in self.users.values() if user.slack_id}

    @cached_property
    def _direct_groups(self) -> Mapping[str, frozenset[str]]:
        """Each user's groups, as the user says (``memberOf``) or the group does (``members``)."""
        found = {name: set(user.member_of) for name, user in self.users.items()}
        for group in self.groups.values():
            for member in group.members:
                found.setdefault(member, set()).add(group.name)
        return {name: frozenset(groups) for name, groups in found.items()}

    @cached_property
    def _parents(self) -> Mapping[str, frozenset[str]]:
        return _edges((child, parent) for parent, child in self._lineage)

    @cached_property
    def _children(self) -> Mapping[str, frozenset[str]]:
        return _edges(self._lineage)

    @cached_property
    def _lineage(self) -> frozenset[tuple[str, str]]:
        """Every (parent, child) pair, whichever of the two groups names the other."""
        groups = self.groups.values()
        return frozenset({(g.parent, g.name) for g in groups if g.parent}
                         | {(g.name, child) for g in groups for child in g.children})


def version_of(components: Mapping[str, Component], groups: Mapping[str, Group],
               users: Mapping[str, User]) -> str:
    """SHA-256 of the entities' content: sorted, without the files they came from."""
    content = {
        "components": [_normalised(c) for c in components.values()],
        "groups": [_normalised(g) for g in groups.values()],
        "users": [_normalised(u) for u in users.values()],
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _normalised(entity: Component | Group | User) -> dict[str, Any]:
    # Order means nothing in these fields (links keep theirs: it is how they are shown).
    unordered = {"kubernetes_selector", "metric_labels", "remedy", "members", "children",
                 "member_of"}
    fields = asdict(entity)
    del fields["source"]
    if not fields.get("metric_labels"):  # a catalog without them keeps the version it had
        fields.pop("metric_labels", None)
    if not fields.get("remedy"):
        fields.pop("remedy", None)
    return {name: sorted(value) if name in unordered else value for name, value in fields.items()}


Entity = TypeVar("Entity", Component, Group, User)


def _by_name(entities: Iterable[Entity]) -> Mapping[str, Entity]:
    return MappingProxyType({e.name: e for e in sorted(entities, key=lambda e: e.name)})


def _edges(pairs: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    for source, target in pairs:
        found.setdefault(source, set()).add(target)
    return {source: frozenset(targets) for source, targets in found.items()}


def _reached(start: Iterable[str], step: Callable[[str], frozenset[str]]) -> frozenset[str]:
    """``start`` and everything ``step`` leads to from it, each visited once (cycles end)."""
    todo = list(start)
    seen = set(todo)
    while todo:
        for found in step(todo.pop()) - seen:
            seen.add(found)
            todo.append(found)
    return frozenset(seen)


EMPTY_CATALOG = Catalog.of((), (), ())
"""The catalog when OPSGATE_CATALOG is unset: no component, group or user is known."""
Catalog.EMPTY = EMPTY_CATALOG
