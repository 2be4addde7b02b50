"""What is wrong with a catalog, one line each: the file, the entity, the field, and what is
expected, e.g. ``catalog/payments.yaml: Component payments-api: spec.owner: missing; expected a
group name such as payments-oncall``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import OpsgateError


@dataclass(frozen=True)
class CatalogProblem:
    """One mistake in one place; ``entity`` reads "Component payments-api", ``field`` a path
    in it such as "spec.owner"."""

    file: str
    entity: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        return ": ".join(part for part in (self.file, self.entity, self.field, self.message)
                         if part)


class CatalogError(OpsgateError):
    """A catalog that cannot be used: every problem found, the first one as the message."""

    code = "catalog_invalid"

    def __init__(self, problems: Iterable[CatalogProblem]) -> None:
        self.problems = tuple(problems)
        assert self.problems, "a CatalogError names at least one problem"
        more = len(self.problems) - 1
        super().__init__(f"{self.problems[0]}" + (f" (and {more} more)" if more else ""))
