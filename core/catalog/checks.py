"""The catalog's entities checked together: each name once per kind, every owner a Group, every
member a User, every parent, child and memberOf a Group, every Slack id one person's. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from core.catalog.descriptors import SLACK_USER, Entity
from core.catalog.model import Component, Group, User
from core.catalog.problems import CatalogProblem

_SHOWN_NAMES = 8  # known names a problem lists before "…"


def cross_problems(entities: Sequence[Entity]) -> list[CatalogProblem]:
    """Every problem between entities, in the order they were read."""
    named = [entity for entity in entities if entity.name]
    groups = {e.name for e in named if isinstance(e, Group)}
    users = {e.name for e in named if isinstance(e, User)}
    return [*_twice(named), *_dangling(named, groups, users), *_shared_slack_ids(named)]


def _twice(entities: Iterable[Entity]) -> Iterator[CatalogProblem]:
    first: dict[tuple[str, str], Entity] = {}
    for entity in entities:
        earlier = first.setdefault((_kind(entity), entity.name), entity)
        if earlier is not entity:
            where = "earlier in this file" if earlier.source == entity.source else \
                f"in {earlier.source} too"
            yield _problem(entity, "metadata.name", f"{entity.name} is defined {where}; "
                                                    "expected each name once per kind")


def claimed_twice(entities: Sequence[Entity]) -> list[CatalogProblem]:
    """A problem for each entity whose kind and name, or whose person's Slack id, an entity of
    another file has too: every one of them, since which was meant cannot be told."""
    files: dict[tuple[str, str], set[str]] = {}
    for entity in entities:
        for key in _claims(entity):
            files.setdefault(key, set()).add(entity.source)
    return [_problem(entity, "metadata.name" if key[0] != "Slack id" else
                     f"metadata.annotations.{SLACK_USER}",
                     f"{key[1]} is claimed in {', '.join(sorted(others))} too; expected each "
                     "name once per kind and each Slack id one person's")
            for entity in entities for key in _claims(entity)
            if (others := files[key] - {entity.source})]


def _claims(entity: Entity) -> list[tuple[str, str]]:
    claims = [(_kind(entity), entity.name)] if entity.name else []
    if isinstance(entity, User) and entity.slack_id:
        claims.append(("Slack id", entity.slack_id))
    return claims


def pruned(entities: Sequence[Entity]) -> tuple[list[Entity], list[CatalogProblem]]:
    """The entities without their references to entities that are not there (a member, a
    group, a parent: they grant nothing) and without the components whose owner is not there
    (nobody owns them), with a problem for each."""
    named = [entity for entity in entities if entity.name]
    groups = {e.name for e in named if isinstance(e, Group)}
    users = {e.name for e in named if isinstance(e, User)}
    kept: list[Entity] = []
    for entity in named:
        if isinstance(entity, Component) and entity.owner not in groups:
            continue
        if isinstance(entity, Group):
            entity = replace(entity, members=tuple(m for m in entity.members if m in users),
                             parent=entity.parent if entity.parent in groups else None,
                             children=tuple(c for c in entity.children if c in groups))
        elif isinstance(entity, User):
            entity = replace(entity, member_of=tuple(g for g in entity.member_of if g in groups))
        kept.append(entity)
    return kept, list(_dangling(named, groups, users))


def _dangling(entities: Iterable[Entity], groups: set[str],
              users: set[str]) -> Iterator[CatalogProblem]:
    for entity in entities:
        if isinstance(entity, Component):
            yield from _unknown(entity, "spec.owner", (entity.owner,), "Group", groups)
        elif isinstance(entity, Group):
            yield from _unknown(entity, "spec.members", entity.members, "User", users)
            yield from _unknown(entity, "spec.parent", (entity.parent or "",), "Group", groups)
            yield from _unknown(entity, "spec.children", entity.children, "Group", groups)
        else:
            yield from _unknown(entity, "spec.memberOf", entity.member_of, "Group", groups)


def _unknown(entity: Entity, field: str, names: Iterable[str], kind: str,
             known: set[str]) -> Iterator[CatalogProblem]:
    for name in names:
        if name and name not in known:
            yield _problem(entity, field, f"{name} is not a {kind} in the catalog; expected "
                                          f"{_one_of(known, kind)}")


def _shared_slack_ids(entities: Iterable[Entity]) -> Iterator[CatalogProblem]:
    first: dict[str, User] = {}
    for user in (e for e in entities if isinstance(e, User) and e.slack_id):
        earlier = first.setdefault(user.slack_id or "", user)
        if earlier is not user:
            yield _problem(user, f"metadata.annotations.{SLACK_USER}",
                           f"{user.slack_id} is also {earlier.name}'s ({earlier.source}); "
                           "expected each person's own Slack id")


def _problem(entity: Entity, field: str, message: str) -> CatalogProblem:
    return CatalogProblem(entity.source, f"{_kind(entity)} {entity.name}", field, message)


def _kind(entity: Entity) -> str:
    return type(entity).__name__


def _one_of(known: set[str], kind: str) -> str:
    if not known:
        return f"a {kind} defined in the catalog (it has none)"
    names = sorted(known)
    shown = ", ".join(names[:_SHOWN_NAMES]) + (", …" if len(names) > _SHOWN_NAMES else "")
    return f"one of {shown}"
