"""One Backstage descriptor (a YAML document already parsed) read as a Component, Group or User,
with a problem for each field that cannot be used. Pure: the files are ``core.catalog.files``'."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.catalog.model import Component, Group, Link, User
from core.catalog.problems import CatalogProblem

API_VERSIONS = ("backstage.io/v1alpha1", "backstage.io/v1beta1")
KINDS = ("Component", "Group", "User")

KUBERNETES_ID = "backstage.io/kubernetes-id"
KUBERNETES_NAMESPACE = "backstage.io/kubernetes-namespace"
KUBERNETES_SELECTOR = "backstage.io/kubernetes-label-selector"
METRIC_LABELS = "opsgate.dev/metric-labels"
"""The labels every metric and alert of the component carries (``service=payments-api``): what
the investigator's metric and alert reads are narrowed to (``core/investigate/scope.py``)."""
REMEDY = ("max-replicas", "regions", "route", "flags")
"""``opsgate.dev/<key>`` annotations the remedies read (``core/remedy.py``): the most replicas
a scale may reach, the regions a route serves from (serving first), the traffic-gateway route,
the OpenFeature ``FeatureFlag`` resource holding the component's flags."""
SLACK_USER = "slack.com/user-id"
SLACK_GROUP = "slack.com/usergroup-id"

NAME = re.compile(r"^[A-Za-z0-9]+([-_.][A-Za-z0-9]+)*$")
SLACK_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
SLACK_GROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")
SLACK_SHAPED = re.compile(r"^[SUW][A-Z0-9]{2,}$")
"""A name the gate would read as a Slack id (a user group ``S…``, a person ``U…``/``W…``)."""
RESERVED_GROUP = "opsgate-approvers"  # core.policy.rules.APPROVERS_GROUP: OPSGATE_APPROVERS only
RESERVED_PREFIX = "opsgate:"
# [kind:][namespace/]name, as Backstage writes a reference to another entity.
REF = re.compile(r"^(?:(?P<kind>[A-Za-z]+):)?(?:(?P<namespace>[^:/]+)/)?(?P<name>[^:/]+)$")

Entity = Component | Group | User
Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Descriptor:
    """What one document gave: an entity (None: another kind, ignored, or no entity at all),
    and every problem found in it. An entity with problems is kept so that the catalog's other
    entities can still be checked against its name."""

    entity: Entity | None
    problems: tuple[CatalogProblem, ...]
    ignored: bool = False


def read_descriptor(document: object, file: str, number: int) -> Descriptor:
    """Document ``number`` (from 1) of ``file`` as an entity of the catalog."""
    if not isinstance(document, Mapping):
        return _unusable(file, f"document {number}: {_shown(document)}; expected a Backstage "
                               "entity (a mapping with apiVersion, kind, metadata and spec)")
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if api_version is not None and not str(api_version).startswith("backstage.io/"):
        return Descriptor(None, (), ignored=True)  # another tool's YAML, e.g. a Deployment
    if kind not in KINDS:
        return _kind_problem(file, number, kind) if _mistyped(kind) else \
            Descriptor(None, (), ignored=True)
    fields = _Fields(document, file, kind, number)
    if api_version not in API_VERSIONS:
        fields.problem(("apiVersion",), f"{_shown(api_version)}; expected "
                                         f"{' or '.join(API_VERSIONS)}")
    entity = _READERS[kind](fields)
    return Descriptor(entity, tuple(fields.problems))


def _unusable(file: str, message: str) -> Descriptor:
    return Descriptor(None, (CatalogProblem(file, None, None, message),))


def _mistyped(kind: object) -> bool:
    """A kind missing, not text, or one of ours in the wrong case (``component``)."""
    return not isinstance(kind, str) or kind.lower() in {k.lower() for k in KINDS}


def _kind_problem(file: str, number: int, kind: object) -> Descriptor:
    return _unusable(file, f"document {number}: kind: {_shown(kind)}; expected "
                           f"{', '.join(KINDS)} (other kinds are ignored)")


def _component(fields: _Fields) -> Component:
    return Component(
        name=fields.name(),
        owner=fields.ref(("spec", "owner"), "Group", "a group name such as payments-oncall"),
        lifecycle=fields.text(("spec", "lifecycle"), "a lifecycle such as production, "
                                                     "experimental or deprecated") or "",
        system=fields.optional_ref(("spec", "system"), "System"),
        title=fields.optional(("metadata", "title")),
        kubernetes_id=fields.optional(("metadata", "annotations", KUBERNETES_ID)),
        kubernetes_namespace=fields.optional(("metadata", "annotations", KUBERNETES_NAMESPACE)),
        kubernetes_selector=fields.selector(("metadata", "annotations", KUBERNETES_SELECTOR)),
        links=fields.links(("metadata", "links")),
        source=fields.file,
        description=fields.optional(("metadata", "description")),
        type=fields.optional(("spec", "type")),
        metric_labels=fields.selector(("metadata", "annotations", METRIC_LABELS)),
        remedy=tuple((key, value) for key in REMEDY if (value := fields.optional(
            ("metadata", "annotations", f"opsgate.dev/{key}"))) is not None),
    )


def _group(fields: _Fields) -> Group:
    return Group(
        name=fields.name(),
        members=fields.refs(("spec", "members"), "User"),
        parent=fields.optional_ref(("spec", "parent"), "Group"),
        children=fields.refs(("spec", "children"), "Group"),
        slack_group=fields.slack_id(("metadata", "annotations", SLACK_GROUP), SLACK_GROUP_ID,
                                    "a Slack user group id such as S0PAYMENTS"),
        display_name=fields.optional(("spec", "profile", "displayName")),
        source=fields.file,
        type=fields.optional(("spec", "type")),
    )


def _user(fields: _Fields) -> User:
    return User(
        name=fields.name(),
        slack_id=fields.slack_id(("metadata", "annotations", SLACK_USER), SLACK_USER_ID,
                                 "a Slack user id such as U0ALICE (U or W, then capitals "
                                 "and digits)"),
        member_of=fields.refs(("spec", "memberOf"), "Group"),
        display_name=fields.optional(("spec", "profile", "displayName")),
        source=fields.file,
    )


def reserved_name(name: str) -> str | None:
    """Why a Group or User may not be called ``name`` (None: it may). The approvers' group is
    OPSGATE_APPROVERS' alone, ``opsgate:`` names are opsgate's own, and a Slack-id-shaped name
    would be read as the Slack user group or person it looks like."""
    if name == RESERVED_GROUP:
        return (f"{name} is reserved: its members are OPSGATE_APPROVERS alone; expected "
                "another name")
    if name.startswith(RESERVED_PREFIX):
        return f"{name!r} is reserved: opsgate: names are opsgate's own; expected another name"
    if SLACK_SHAPED.match(name):
        return (f"{name} is reserved: it is shaped like a Slack id (S…, U…, W…); expected a "
                "lowercase name, with a Slack user group linked by slack.com/usergroup-id")
    return None


_READERS: dict[str, Callable[[_Fields], Entity]] = {
    "Component": _component, "Group": _group, "User": _user}


class _Fields:
    """One document's fields as read, each mistake noted against the entity and field."""

    def __init__(self, document: Mapping[Any, Any], file: str, kind: str, number: int) -> None:
        self.document, self.file, self.kind = document, file, kind
        name = self._at(("metadata", "name"))
        self.entity = f"{kind} {name}" if isinstance(name, str) and name else \
            f"{kind} in document {number}"
        self.problems: list[CatalogProblem] = []
        for path in (("metadata",), ("spec",), ("metadata", "annotations")):
            if self._at(path) is not None and not isinstance(self._at(path), Mapping):
                self.problem(path, f"{_shown(self._at(path))}; expected a mapping")

    def problem(self, path: Path, message: str) -> None:
        self.problems.append(CatalogProblem(self.file, self.entity, _label(path), message))

    def name(self) -> str:
        example = {"Component": "payments-api", "Group": "payments-oncall"}.get(self.kind, "alice")
        name = self.text(("metadata", "name"), f"a name such as {example}") or ""
        reserved = reserved_name(name) if self.kind in ("Group", "User") else None
        if reserved:
            self.problem(("metadata", "name"), reserved)
        elif name and (not NAME.match(name) or len(name) > 63):
            self.problem(("metadata", "name"), f"{name!r} is not a name; expected letters and "
                                               f"digits joined by - _ or ., such as {example}")
        return name

    def text(self, path: Path, expected: str) -> str | None:
        """A required string: missing or empty is a problem."""
        value = self.optional(path, expected)
        if value is None and not self._wrong_type(path):
            self.problem(path, f"missing; expected {expected}")
        return value

    def optional(self, path: Path, expected: str = "text") -> str | None:
        value = self._at(path)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.problem(path, f"{_shown(value)}; expected {expected}")
            return None
        return value.strip() or None

    def texts(self, path: Path, expected: str) -> tuple[str, ...]:
        value = self._at(path)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.problem(path, f"{_shown(value)}; expected a list of {expected}")
            return ()
        return tuple(value)

    def ref(self, path: Path, kind: str, expected: str) -> str:
        value = self.text(path, expected)
        return self._plain(path, value, kind) if value else ""

    def optional_ref(self, path: Path, kind: str) -> str | None:
        value = self.optional(path, f"a {kind.lower()} name")
        return self._plain(path, value, kind) if value else None

    def refs(self, path: Path, kind: str) -> tuple[str, ...]:
        values = self.texts(path, f"{kind.lower()} names")
        return tuple(dict.fromkeys(name for value in values
                                   if (name := self._plain(path, value, kind))))

    def slack_id(self, path: Path, form: re.Pattern[str], expected: str) -> str | None:
        value = self.optional(path, expected)
        if value is not None and not form.match(value):
            self.problem(path, f"{value!r}; expected {expected}")
        return value

    def selector(self, path: Path) -> tuple[tuple[str, str], ...]:
        value = self.optional(path, "labels such as app=payments-api,tier=web")
        pairs = label_pairs(value or "")
        if pairs is None:
            self.problem(path, f"{value!r}; expected key=value labels separated by commas, such "
                               "as app=payments-api,tier=web")
        return pairs or ()

    def links(self, path: Path) -> tuple[Link, ...]:
        value = self._at(path)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.problem(path, f"{_shown(value)}; expected a list of links (url, title, type)")
            return ()
        return tuple(link for i, item in enumerate(value)
                     if (link := self._link((*path, i), item)) is not None)

    def _link(self, path: Path, item: object) -> Link | None:
        if not isinstance(item, Mapping):
            self.problem(path, f"{_shown(item)}; expected a link with url and title")
            return None
        url = self.text((*path, "url"), "an http(s) URL such as https://runbooks.example.com/x")
        if url and not url.startswith(("https://", "http://")):
            self.problem((*path, "url"), f"{url!r}; expected an http(s) URL")
            return None
        title = self.optional((*path, "title")) or url
        return Link(url, title, self.optional((*path, "type"))) if url and title else None

    def _plain(self, path: Path, value: str, kind: str) -> str:
        """The plain name of a reference: payments-oncall, group:payments-oncall and
        group:default/payments-oncall all name payments-oncall ("" when it names none)."""
        found = REF.match(value.strip())
        if found is None or not NAME.match(found["name"]):
            self.problem(path, f"{value!r}; expected a {kind.lower()} name such as "
                               f"{kind.lower()}:default/name")
            return ""
        if found["kind"] is not None and found["kind"].lower() != kind.lower():
            self.problem(path, f"{value!r} names a {found['kind']}; expected a {kind}")
            return ""
        return found["name"]

    def _at(self, path: Path) -> object:
        value: object = self.document
        for key in path:
            if isinstance(key, int):
                value = value[key] if isinstance(value, list) and key < len(value) else None
            else:
                value = value.get(key) if isinstance(value, Mapping) else None
        return value

    def _wrong_type(self, path: Path) -> bool:
        return self._at(path) is not None and not isinstance(self._at(path), str)


def _label(path: Path) -> str:
    """spec.owner, metadata.links[0].url"""
    return "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path)[1:]


def label_pairs(text: str) -> tuple[tuple[str, str], ...] | None:
    """``app=payments-api,tier=web`` as sorted pairs; None when a part is not ``key=value``
    (Kubernetes' set-based forms such as ``tier in (web)`` or ``tier!=web`` are not read)."""
    pairs = []
    for part in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = part.replace("==", "=", 1).partition("=")
        if not (equals and key.strip() and value.strip()) or "!" in key or "=" in value:
            return None
        pairs.append((key.strip(), value.strip()))
    return tuple(sorted(pairs))


def _shown(value: object, limit: int = 60) -> str:
    """A found value as a problem names it: 'production', a list, missing."""
    if value is None:
        return "missing"
    if isinstance(value, Mapping | list):
        return "a mapping" if isinstance(value, Mapping) else "a list"
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[:limit - 1]}…"
