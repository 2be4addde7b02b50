"""The directory: where the gate reads who is in which group (``OPSGATE_DIRECTORY``). Slack's
user groups (``slack``) and/or the catalog files the operator names (``catalog`` for all of
them, ``catalog:PATH`` for a file or folder inside the catalog's folder, an org folder). A
Group's ``members``, ``parent``, ``children`` and Slack user group, and a User's ``memberOf``
and Slack id, count only when their file is in the directory: a file anywhere else in the
catalog names its groups and people but makes nobody a member (a member never vouches for
themselves). Unset: no group has members; only ``OPSGATE_APPROVERS`` names approvers.

Pure: ``as_directory_says`` reads a catalog already loaded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path, PurePosixPath

from core.catalog.model import Catalog, Group

SLACK = "slack"
CATALOG = "catalog"


@dataclass(frozen=True)
class Directory:
    """Where membership is read: Slack's user groups (``slack``) and the catalog paths
    (relative to the catalog's folder; ``.``: every file)."""

    slack: bool = False
    catalog: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Sequence[str]) -> Directory:
        """``OPSGATE_DIRECTORY``'s entries; ``ValueError`` naming the entry that is not
        ``slack``, ``catalog`` or ``catalog:PATH`` inside the catalog's folder."""
        slack, paths = False, []
        for entry in entries:
            if entry == SLACK:
                slack = True
            elif entry == CATALOG:
                paths.append(".")
            elif entry.startswith(f"{CATALOG}:"):
                paths.append(_inside(entry, entry.removeprefix(f"{CATALOG}:")))
            else:
                raise ValueError(f"{entry!r} is not slack, catalog or catalog:PATH")
        return cls(slack, tuple(dict.fromkeys(paths)))

    @property
    def unset(self) -> bool:
        return not self.slack and not self.catalog

    def covers(self, source: str, root: Path | None) -> bool:
        """Whether the catalog file ``source`` is in the directory (``root``: OPSGATE_CATALOG,
        a folder or one file)."""
        if root is None or not self.catalog:
            return False
        base = root if root.is_dir() else root.parent
        try:
            relative = PurePosixPath(Path(source).relative_to(base).as_posix())
        except ValueError:
            return False
        return any(path == "." or relative == PurePosixPath(path)
                   or PurePosixPath(path) in relative.parents for path in self.catalog)

    def missing(self, root: Path | None) -> tuple[str, ...]:
        """The ``catalog:PATH`` entries naming nothing inside the catalog (``root``)."""
        if root is None:
            return tuple(f"{CATALOG}:{path}" for path in self.catalog)
        base = root if root.is_dir() else root.parent
        return tuple(f"{CATALOG}:{path}" for path in self.catalog
                     if path != "." and not (base / path).exists())

    def words(self) -> str:
        """Where membership comes from, as one sentence's end."""
        said = [*(["Slack user groups"] if self.slack else []),
                *(["every catalog file" if path == "." else f"the catalog's {path}"
                   for path in self.catalog])]
        if not said:
            return ("nowhere (OPSGATE_DIRECTORY is unset): no group has members, only "
                    "OPSGATE_APPROVERS may approve")
        return " and ".join(said) + " (OPSGATE_DIRECTORY)"


def _inside(entry: str, path: str) -> str:
    """A catalog path as the directory keeps it: relative, inside, normalised."""
    pure = PurePosixPath(path.strip().rstrip("/") or ".")
    if not path.strip() or pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"{entry!r}: expected catalog:PATH with PATH a file or folder inside "
                         "OPSGATE_CATALOG (relative, without ..)")
    return str(pure)


def as_directory_says(catalog: Catalog, directory: Directory, root: Path | None) -> Catalog:
    """``catalog`` as the gate reads membership: Groups and Users outside the directory keep
    their names and grant nothing; without ``slack``, no Group stands for a Slack user group."""
    return _as_directory_says(catalog, directory, root)


@lru_cache(maxsize=8)
def _as_directory_says(catalog: Catalog, directory: Directory, root: Path | None) -> Catalog:
    groups = [_group(g, directory.covers(g.source, root), directory.slack)
              for g in catalog.groups.values()]
    users = [u if directory.covers(u.source, root) else
             replace(u, slack_id=None, member_of=()) for u in catalog.users.values()]
    return Catalog.of(catalog.components.values(), groups, users, catalog.sources,
                      catalog.ignored)


def _group(group: Group, covered: bool, slack: bool) -> Group:
    if not covered:
        return replace(group, members=(), parent=None, children=(), slack_group=None)
    return group if slack else replace(group, slack_group=None)


__all__ = ["Directory", "as_directory_says"]
