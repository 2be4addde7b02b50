"""How an investigation is watched while it runs: each look of an agent run as it starts and
ends (``LookSeen``: its title, its state, the one-line gist of its answer and where that answer
can be seen), the findings the run recorded, and its end. A front end plugs in an
``Investigation`` (``Extensions.investigation``) and shows it; the agent only tells it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, Protocol

from core.chat import Link

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class Watched:
    """An investigation as a run tells it: showing it never stops the run (a failure to show
    is logged), and a run nobody watches tells nothing."""

    shown: Investigation | None = None

    def look(self, seen: LookSeen) -> None:
        if self.shown is not None:
            try:
                self.shown.look(seen)
            except Exception:
                log.exception("investigation: could not show look %d", seen.number)

    def found(self, summary: str) -> None:
        if self.shown is not None:
            try:
                self.shown.found(summary)
            except Exception:
                log.exception("investigation: could not show the findings")

    def ended(self) -> None:
        if self.shown is not None:
            try:
                self.shown.ended()
            except Exception:
                log.exception("investigation: could not end it")
