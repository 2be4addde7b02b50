"""Who may approve what, audited (issue 40). ``rights_of``: the people of every approving
group as the gate reads them now (the policies' groups, the owners when a permit reads them,
``opsgate-approvers``: OPSGATE_APPROVERS), from the catalog as the directory says and the
policy files in force. ``record``: one ``approval_rights_change`` row each time that changes,
with the groups before and after and the catalog and policy files that changed, written once
whichever process sees the reload first. ``RightsWatch``: the thread that looks every few
seconds (``opsgate serve`` runs it). ``changes``: the rows, newest first, as sentences
(``opsgate policy changes``). Slack user groups are listed by their id: Slack keeps their
members' history."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from core.catalog.files import CatalogError, catalog_files
from core.catalog.model import Catalog
from core.db.tables import approval_rights_change
from core.policy.files import policy_files
from core.policy.judge import is_slack_group
from core.policy.rules import APPROVERS_GROUP, PolicyError

if TYPE_CHECKING:
    from core.bootstrap import App
    from core.domain.policy import ApprovalPolicy
    from core.settings import Settings

log = logging.getLogger(__name__)

Rights = dict[str, list[str]]
"""An approving group → the Slack ids (people, and Slack user groups linked to it) in it."""


def rights_of(policy: ApprovalPolicy) -> tuple[Rights, dict[str, str]]:
    """The approving groups' people now, and the people's names (by Slack id)."""
    catalog, rules = policy.catalog(), policy.cedar
    groups = {group for group in rules.named_groups if not is_slack_group(group)}
    if any(rule.effect == "permit" and rule.on_owners for rule in rules.rules.values()):
        groups |= {component.owner for component in catalog.components.values()}
    rights = {group: sorted(policy.approvers if group == APPROVERS_GROUP
                            else catalog.members(group) | _slack_groups(catalog, group))
              for group in sorted(groups)}
    names = {user.slack_id: user.display_name or user.name
             for user in catalog.users.values() if user.slack_id}
    return rights, names


def _slack_groups(catalog: Catalog, group: str) -> frozenset[str]:
    """The Slack user groups linked to ``group`` or to a group below it."""
    seen, todo = {group}, [group]
    while todo:
        for child in catalog.children(todo.pop()) - seen:
            seen.add(child)
            todo.append(child)
    return frozenset(found.slack_group for name in seen
                     if (found := catalog.groups.get(name)) and found.slack_group)


def rights_version(rights: Rights) -> str:
    text = json.dumps(rights, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def record(app: App, now: datetime | None = None) -> bool:
    """Write the change of who may approve what since the last row, if any; whether this call
    wrote it (False: nothing changed, or another process wrote the same change first)."""
    rights, names = rights_of(app.policy)
    version = rights_version(rights)
    sources = _sources(app.settings)
    table = approval_rights_change
    try:
        with app.engine.begin() as conn:
            last = conn.execute(select(table).order_by(table.c.seq.desc()).limit(1)
                                ).mappings().first()
            if last is not None and last["rights_version"] == version:
                return False
            before: Mapping[str, str] = last["sources"] if last is not None else {}
            conn.execute(insert(table).values(
                seq=1 if last is None else last["seq"] + 1,
                recorded_at=now or datetime.now(UTC), rights_version=version,
                policy_version=app.policy.version,
                before=last["after"] if last is not None else {}, after=rights, names=names,
                files=sorted(p for p in {*before, *sources} if before.get(p) != sources.get(p)),
                sources=sources))
    except IntegrityError:
        return False  # a peer recorded this change (the same seq) first
    return True


def _sources(settings: Settings) -> dict[str, str]:
    """Every catalog and policy file read, with a hash of its content."""
    files: list[Path] = []
    with suppress(CatalogError):  # none to list: the folder gone, said by /readyz
        files += catalog_files(settings.catalog) if settings.catalog is not None else []
    with suppress(PolicyError):
        files += policy_files(settings.policy) if settings.policy is not None else []
    found: dict[str, str] = {}
    for file in files:
        try:
            found[str(file)] = hashlib.sha256(file.read_bytes()).hexdigest()[:12]
        except OSError:
            found[str(file)] = "unreadable"
    return found


class RightsWatch:
    """A daemon thread recording every change of who may approve what, every ``every_s``."""

    def __init__(self, app: App, every_s: float = 2.0) -> None:
        self.app, self.every_s = app, every_s
        self._stop = threading.Event()
        self._seen: str | None = None

    def start(self) -> RightsWatch:
        threading.Thread(target=self._run, name="opsgate-rights", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def look(self) -> None:
        """Record a change this process had not seen yet (a peer may have recorded it)."""
        version = rights_version(rights_of(self.app.policy)[0])
        if version != self._seen:
            record(self.app)
            self._seen = version

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.look()
            except SQLAlchemyError as exc:  # the database away: look again next time
                log.warning("recording who may approve what: %s", str(exc).splitlines()[0])
            self._stop.wait(self.every_s)


# -- read back ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """One row read back: when, which files, who gained and who lost which group."""

    at: datetime
    files: tuple[str, ...]
    policy_version: str
    gained: tuple[tuple[str, str], ...]  # (person as named, group)
    lost: tuple[tuple[str, str], ...]
    first: bool

    def lines(self) -> Iterator[str]:
        when = self.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        why = ("first record" if self.first else
               f"after {', '.join(self.files)} changed" if self.files else
               "after a setting or the directory changed")
        yield f"{when}, {why} (policy version {self.policy_version}):"
        for verb, pairs in (("gained", self.gained), ("lost", self.lost)):
            for person, group in pairs:
                yield f"  {person} {verb} approval as {group}"


def changes(engine: Engine, limit: int = 20) -> list[Change]:
    """The last ``limit`` changes, newest first."""
    table = approval_rights_change
    with engine.connect() as conn:
        rows = conn.execute(select(table).order_by(table.c.seq.desc()).limit(limit)).mappings()
        return [_change(dict(row)) for row in rows]


def _change(row: dict[str, Any]) -> Change:
    before, after, names = row["before"], row["after"], row["names"]
    at = row["recorded_at"]
    return Change(at if at.tzinfo else at.replace(tzinfo=UTC), tuple(row["files"]),
                  row["policy_version"][:12], _moved(after, before, names),
                  _moved(before, after, names), row["seq"] == 1)


def _moved(into: Rights, out_of: Rights, names: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(person, group) pairs in ``into`` and not in ``out_of``."""
    return tuple((_person(member, names), group) for group in sorted(into)
                 for member in into[group] if member not in out_of.get(group, ()))


def _person(member: str, names: Mapping[str, str]) -> str:
    if is_slack_group(member):
        return f"Slack user group {member}"
    return f"{names[member]} ({member})" if member in names else member
