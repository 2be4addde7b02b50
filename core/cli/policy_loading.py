"""What ``opsgate policy check`` and ``explain`` share: the policy the gate would decide with,
or every problem of the policies and the catalog, each printed on its own line."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from core.cli.command import EXIT_BAD_SETTINGS, CliError

if TYPE_CHECKING:
    from core.domain.policy import ApprovalPolicy
    from core.settings import Settings


def said_problems(problems: Iterable[object]) -> int:
    for problem in problems:
        print(problem, file=sys.stderr, flush=True)
    return EXIT_BAD_SETTINGS


def gate_policy(settings: Settings) -> ApprovalPolicy:
    """The policy the gate would decide with; ``Unusable`` carrying every problem."""
    from core.bootstrap import policy_from_settings
    from core.catalog import CatalogError
    from core.policy.rules import PolicyError

    try:
        return policy_from_settings(settings)
    except (PolicyError, CatalogError) as error:
        raise Unusable(error.problems) from error


class Unusable(CliError):
    """Policies or a catalog the gate cannot use: every problem, each on its own line."""

    def __init__(self, problems: Sequence[object]) -> None:
        super().__init__(str(problems[0]), exit_code=EXIT_BAD_SETTINGS)
        self.problems = tuple(problems)
