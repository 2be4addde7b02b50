"""Bolt listeners, one module per kind of Slack request; each exposes ``register(bolt, cases)``.

Listeners close over their dependencies instead of reading them from Bolt's context: Bolt
deep-copies the context for lazy listeners, which must not copy a database engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slack_bolt import Ack

from bot.failures import report

if TYPE_CHECKING:
    from bot.cases import SlackCases

Body = dict[str, Any]


def acknowledge(ack: Ack) -> None:
    """The ack of a request whose work runs after it (lazily)."""
    ack()


def lazy(work: Callable[[Body], None], cases: SlackCases) -> Callable[[Body], None]:
    """``work`` as a Bolt lazy listener whose failures reach the one error handler (Bolt would
    only log them)."""

    def run(body: Body) -> None:
        try:
            work(body)
        except Exception as error:  # the one error handler decides what the user reads
            report(error, body, cases)

    return run
