"""The agent as the bot sees it: one method that continues a case's conversation and returns the
reply to post in its thread. ``agent.build_agent(app)`` provides the real one when the agent
package is installed; without it the bot only acknowledges in the thread."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Protocol, cast
from uuid import UUID

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)


class Agent(Protocol):
    def converse(self, case_id: UUID, text: str, *, user: str, correlation_id: str) -> str:
        """Continue the case's conversation with ``text`` from ``user``; the reply to post.
        Never raises for model failures (returns a short explanation instead)."""
        ...


def configured_agent(app: App) -> Agent | None:
    """The agent the ``agent`` package builds for ``app``; None when it is not there."""
    try:
        module = importlib.import_module("agent")
    except ImportError:
        return None
    build = getattr(module, "build_agent", None)
    if build is None:
        log.info("the agent package has no build_agent yet: the bot runs without an agent")
        return None
    return cast(Agent, build(app))
