"""The policy files: ``OPSGATE_POLICY`` names a ``.cedar`` file or a folder of them (read
recursively, sorted by path); ``load_rules`` reads them all, or says every problem, each on one
line naming the file and the policy."""

from __future__ import annotations

from pathlib import Path

from core.catalog.model import Catalog
from core.policy.judge import is_slack_group
from core.policy.rules import APPROVERS_GROUP, PolicyError, PolicyProblem, Rules, read_rules

EXPECTED = "expected a .cedar file or a folder of .cedar files"


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
