"""The catalog's files: OPSGATE_CATALOG names a ``catalog-info.yaml`` or a folder of them (read
recursively, sorted); ``load_catalog`` reads them all or says every problem, and
``CatalogSource`` gives a running service its sound files' catalog without a restart."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml  # type: ignore[import-untyped]

from core.catalog.checks import claimed_twice, cross_problems, pruned
from core.catalog.descriptors import Entity, read_descriptor
from core.catalog.model import EMPTY_CATALOG, Catalog, Component, Group, User
from core.catalog.problems import CatalogError, CatalogProblem
from core.watched_files import Stamp, Throttle, stamp_of

__all__ = ["CatalogError", "CatalogProblem", "CatalogSource", "catalog_files", "catalog_of",
           "error_files", "load_catalog", "load_sound_files"]

SUFFIXES = (".yaml", ".yml")
EXPECTED = ("expected a Backstage catalog-info.yaml file or a folder of *.yaml files "
            "(Component, Group, User)")

log = logging.getLogger(__name__)



def catalog_files(path: Path) -> tuple[Path, ...]:
    """The files ``path`` names: itself, or every *.yaml and *.yml below it (hidden folders
    such as .git left out), in the order of their paths."""
    try:
        if path.is_file():
            return (path,)
        if not path.is_dir():
            raise CatalogError([CatalogProblem(str(path), None, None,
                                               f"no such file or folder; {EXPECTED}")])
    except OSError as exc:  # e.g. a folder on the way that we may not enter
        raise CatalogError([CatalogProblem(str(path), None, None,
                                           f"cannot be read: {exc.strerror or exc}")]) from exc
    found = tuple(sorted(_yaml_below(path), key=lambda file: file.relative_to(path).parts))
    if not found:
        raise CatalogError([CatalogProblem(str(path), None, None,
                                           f"no *.yaml or *.yml file in this folder; {EXPECTED}")])
    return found


@dataclass(frozen=True)
class _Read:
    """One file as read: its entities, its own problems and the entities of other kinds."""

    file: Path
    entities: tuple[Entity, ...]
    problems: tuple[CatalogProblem, ...]
    ignored: int


def load_catalog(path: Path) -> Catalog:
    """The catalog in ``path``; raises ``CatalogError`` naming every problem in every file."""
    read = [_read_file(file) for file in catalog_files(path)]
    entities = [entity for one in read for entity in one.entities]
    problems = [*(p for one in read for p in one.problems), *cross_problems(entities)]
    if problems:
        raise CatalogError(problems)
    return _catalog_of(read, entities)


@dataclass(frozen=True)
class SoundFiles:
    """The catalog of the sound files, every problem found, and the files left out."""

    catalog: Catalog
    problems: tuple[CatalogProblem, ...]
    left_out: tuple[str, ...]


def load_sound_files(path: Path) -> SoundFiles:
    """The catalog of ``path``'s sound files (fail closed: no grant outlives the file that
    stopped making it). A file with a problem of its own, and every file claiming a name or a
    Slack id another file claims too, is left out; what the rest refers to in a file left out
    grants nothing (a member, a group, a parent dropped; a component whose owner is gone,
    owned by nobody, dropped). The folder gone: the empty catalog."""
    try:
        read = [_read_file(file) for file in catalog_files(path)]
    except CatalogError as error:
        return SoundFiles(EMPTY_CATALOG, error.problems, (str(path),))
    problems = [p for one in read for p in one.problems]
    twice = claimed_twice([e for one in read if not one.problems for e in one.entities])
    left_out = error_files([*problems, *twice])
    sound = [one for one in read if str(one.file) not in left_out]
    entities, dangling = pruned([e for one in sound for e in one.entities])
    return SoundFiles(_catalog_of(sound, entities), (*problems, *twice, *dangling), left_out)


def _read_file(file: Path) -> _Read:
    documents, problems = _documents(file)
    entities: list[Entity] = []
    ignored = 0
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue  # an empty document: a "---" at the end, a file of comments
        read = read_descriptor(document, str(file), number)
        problems += read.problems
        ignored += read.ignored
        entities += [read.entity] if read.entity is not None else []
    return _Read(file, tuple(entities), tuple(problems), ignored)


def _catalog_of(read: list[_Read], entities: list[Entity]) -> Catalog:
    """The catalog of ``entities``, read from the files of ``read``."""
    return Catalog.of([e for e in entities if isinstance(e, Component)],
                      [e for e in entities if isinstance(e, Group)],
                      [e for e in entities if isinstance(e, User)],
                      sources=(str(one.file) for one in read),
                      ignored=sum(one.ignored for one in read))


def catalog_of(path: Path | None) -> Catalog:
    """The catalog OPSGATE_CATALOG names; the empty catalog when it names none."""
    return EMPTY_CATALOG if path is None else load_catalog(path)


class CatalogSource:
    """The catalog of a running service: at most every ``check_every_s`` it looks at the files'
    sizes and times, and reads them again when they changed, file by file: a file with a
    problem contributes nothing while the sound files decide (fail closed: deleting the file
    that granted someone access revokes it even while another file is broken). ``problem`` says
    the first problem, ``broken`` names the files left out (logged once). The first read is not
    forgiven: a bad catalog raises ``CatalogError``, so the service does not start."""

    def __init__(self, path: Path | None, *, check_every_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.problem: str | None = None
        self.broken: tuple[str, ...] = ()
        self._stamp = _stamp(path)
        self._catalog = catalog_of(path)
        self._throttle = Throttle(check_every_s, clock)

    def current(self) -> Catalog:
        """The catalog of the sound files, as they were at the last look."""
        if self.path is not None:
            self._throttle.look(self._reload_if_changed)
        return self._catalog

    def _reload_if_changed(self) -> None:
        path = self.path
        if path is None:
            return
        stamp = _stamp(path)  # before reading: an edit during the read is seen next time
        if stamp == self._stamp:
            return
        self._stamp = stamp
        read = load_sound_files(path)
        problem = str(CatalogError(read.problems)) if read.problems else None
        if problem is not None and problem != self.problem:
            log.warning("catalog %s: version %s from its sound files; left out: %s; %s", path,
                        read.catalog.version[:12], ", ".join(read.left_out) or "none", problem)
        elif read.catalog.version != self._catalog.version:
            log.info("catalog %s: version %s", path, read.catalog.version[:12])
        self._catalog, self.problem, self.broken = read.catalog, problem, read.left_out


def error_files(problems: Iterable[CatalogProblem]) -> tuple[str, ...]:
    """The files ``problems`` name, each once, in their order."""
    return tuple(dict.fromkeys(problem.file for problem in problems))


def _yaml_below(folder: Path) -> Iterator[Path]:
    for root, folders, names in os.walk(folder):  # symbolic links to folders are not followed
        folders[:] = [name for name in folders if not name.startswith(".")]
        yield from (Path(root, name) for name in names if name.endswith(SUFFIXES))


def _documents(file: Path) -> tuple[list[object], list[CatalogProblem]]:
    """The YAML documents of ``file`` (``---`` between them), or why there are none."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return [], [CatalogProblem(str(file), None, None, f"cannot be read: {why}")]
    try:
        return list(yaml.safe_load_all(text)), []
    except yaml.YAMLError as exc:
        return [], [CatalogProblem(str(file), None, None, _syntax(exc))]


def _syntax(exc: yaml.YAMLError) -> str:
    """"line 12, column 3: not valid YAML: mapping values are not allowed here" """
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}not valid YAML: {what}"


def _stamp(path: Path | None) -> Stamp:
    """What changes when a catalog file is edited, added, removed or replaced."""
    try:
        return stamp_of(catalog_files(path) if path is not None else ())
    except CatalogError:
        return ()
