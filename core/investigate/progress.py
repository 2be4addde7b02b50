"""How an investigation is watched while it runs: each look of an agent run as it starts and
ends (``LookSeen``: its title, its state, the one-line gist of its answer and where that answer
can be seen), the findings the run recorded, and its end. A front end plugs in an
``Investigation`` (``Extensions.investigation``) and shows it; the agent only tells it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from core.chat import Link

LookState = Literal["pending", "in_progress", "complete", "error"]


@dataclass(frozen=True)
class LookSeen:
    """One look of a run: ``number`` counts the run's looks from 1."""

    number: int
    tool: str
    title: str
    state: LookState
    gist: str | None = None
    sources: tuple[Link, ...] = ()


class Investigation(Protocol):
    def look(self, seen: LookSeen) -> None:
        """A look started (``in_progress``) or ended (``complete``, or ``error`` with why)."""
        ...

    def found(self, summary: str) -> None:
        """The run recorded its findings (``summary``: the cause as the agent wrote it)."""
        ...

    def ended(self) -> None:
        """The run is over (whatever its outcome): nothing more will be told."""
        ...
