"""The policy files: ``OPSGATE_POLICY`` names a ``.cedar`` file or a folder of them (read
recursively, sorted by path); ``load_rules`` reads them all, or says every problem, each on one
line naming the file and the policy; ``PolicySource`` gives a running service the files as they
are now, without a restart."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from core.catalog.model import Catalog
from core.policy.judge import is_slack_group
from core.policy.rules import (
    APPROVERS_GROUP,
    PolicyError,
    PolicyProblem,
    Rules,
    read_rules,
    refusing_rules,
)
from core.watched_files import Stamp, Throttle, stamp_of

EXPECTED = "expected a .cedar file or a folder of .cedar files"

log = logging.getLogger(__name__)


def policy_files(path: Path) -> tuple[Path, ...]:
    """The ``.cedar`` files ``path`` names; ``PolicyError`` when there are none."""
    if path.is_file():
        return (path,)
    if path.is_dir():
        # Hidden folders are skipped, as the catalog's are: a Kubernetes ConfigMap volume holds
        # each file twice, once in its hidden ``..<timestamp>`` folder.
        found = tuple(sorted(p for p in path.rglob("*.cedar") if p.is_file() and not any(
            part.startswith(".") for part in p.relative_to(path).parent.parts)))
        if found:
            return found
        raise PolicyError([PolicyProblem(str(path), None, f"no .cedar file in it; {EXPECTED}")])
    raise PolicyError([PolicyProblem(str(path), None, f"no such file or folder; {EXPECTED}")])


def load_rules(path: Path) -> Rules:
    """The rules of the files ``path`` names (each named by its path), checked against the
    schema; ``PolicyError`` naming every problem."""
    sources: list[tuple[str, str]] = []
    problems: list[PolicyProblem] = []
    for file in policy_files(path):
        try:
            sources.append((str(file), file.read_text("utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(PolicyProblem(str(file), None, f"cannot be read: {exc}"))
    if problems:
        raise PolicyError(problems)
    return read_rules(sources)


def catalog_problems(rules: Rules, catalog: Catalog) -> list[PolicyProblem]:
    """The groups and components the policies name that the catalog does not have (a Slack
    user group id, ``S0614TZR7``, and ``opsgate-approvers`` need no catalog entry)."""
    problems: list[PolicyProblem] = []
    for rule in rules.rules.values():
        if rule.source.startswith("opsgate:"):
            continue
        for kind, name in rule.names:
            if kind not in ("Group", "Component"):
                continue
            known = (name in catalog.components if kind == "Component"
                     else name in catalog.groups or name == APPROVERS_GROUP
                     or is_slack_group(name))
            if not known:
                problems.append(PolicyProblem(rule.source, rule.name,
                                              f'{kind}::"{name}" is not in the catalog '
                                              "(OPSGATE_CATALOG)"))
    return problems


class PolicySource:
    """The policies of a running service: at most every ``check_every_s`` it looks at the
    ``.cedar`` files' sizes and times (an added or removed file too) and reads them again when
    they changed. A set with a problem decides nothing: nobody approves and nothing approves
    itself until it is fixed (a broken file could have been a forbid), ``problem`` says why and
    ``broken`` names the files (logged once). The first read is not forgiven: a bad set raises
    ``PolicyError``, so the service does not start."""

    def __init__(self, path: Path, *, check_every_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.problem: str | None = None
        self.broken: tuple[str, ...] = ()
        self._stamp = _stamp(path)
        self._rules = load_rules(path)
        self._throttle = Throttle(check_every_s, clock)

    def current(self) -> Rules:
        """The policies as the files were at the last look."""
        self._throttle.look(self._reload_if_changed)
        return self._rules

    def _reload_if_changed(self) -> None:
        stamp = _stamp(self.path)  # before reading: an edit during the read is seen next time
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            rules = load_rules(self.path)
        except PolicyError as error:
            if str(error) != self.problem:
                log.warning("policy %s: nobody approves until it is fixed: %s", self.path, error)
            self.problem = str(error)
            self.broken = tuple(dict.fromkeys(problem.source for problem in error.problems))
            self._rules = refusing_rules()
            return
        if rules.version != self._rules.version:
            log.info("policy %s: version %s", self.path, rules.version)
        self._rules, self.problem, self.broken = rules, None, ()


def _stamp(path: Path) -> Stamp:
    """What changes when a policy file is edited, added, removed or replaced."""
    try:
        return stamp_of(policy_files(path))
    except PolicyError:
        return ()
