"""The agent as the bot sees it: one method that continues a case's conversation and returns the
reply to post in its thread. ``configured_agent`` gives the ``agent`` package's agent, built on
the first conversation rather than at start-up (importing LangChain takes seconds that
``opsgate serve`` and ``opsgate demo`` should not wait for)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from core.tracing import bound

if TYPE_CHECKING:
    from core.bootstrap import App


Watch = Callable[[str], None]
"""Told, while the agent works, what it is looking at ("querying http_5xx_ratio for …")."""


class Agent(Protocol):
    def converse(self, case_id: UUID, text: str, *, user: str, correlation_id: str,
                 watch: Watch | None = None) -> str:
        """Continue the case's conversation with ``text`` from ``user``; the reply to post.
        Never raises for model failures (returns a short explanation instead)."""
        ...


class LazyAgent:
    """``agent.build_agent(app)``, built when the first conversation needs it; each turn runs
    with the Slack request's correlation id bound, so its gateway calls carry it."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._agent: Agent | None = None
        self._lock = threading.Lock()

    def converse(self, case_id: UUID, text: str, *, user: str, correlation_id: str,
                 watch: Watch | None = None) -> str:
        with bound(correlation_id):
            return self._built().converse(case_id, text, user=user,
                                          correlation_id=correlation_id, watch=watch)

    def _built(self) -> Agent:
        with self._lock:
            if self._agent is None:
                from agent import build_agent

                self._agent = build_agent(self._app)
            return self._agent


def configured_agent(app: App) -> Agent:
    """The agent of ``app`` (the ``agent`` package's, built on first use)."""
    return LazyAgent(app)
