"""The consumers of the closed loop, one small module each: each turns a delivered message into
case-service writes (facts come back only as transitions and notes). ``build_consumers`` is the
one list every loop (in-process or ``opsgate consume``) runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.bootstrap import App
    from core.messaging.consumer import Consumer

CONSUMER_NAMES = ("intake", "analyst", "planner", "gatekeeper", "executor", "verifier",
                  "notifier", "librarian")
"""Every consumer, in the order the in-process bus calls the subscribers of one topic."""


def build_consumers(app: App) -> list[Consumer]:
    """One instance of every consumer, wired to ``app``; a consumer the app's extensions
    provide under the same name (the agent's planner) replaces the core one."""
    factories: dict[str, Callable[[App], Consumer]] = {**_core_consumers(),
                                                      **app.extensions.consumers}
    return [factories[name](app) for name in CONSUMER_NAMES]


def subscriptions() -> dict[str, tuple[str, ...]]:
    """The topics each consumer takes, by name, without building any: which inbox rows prove a
    message delivered (a replacement keeps the topics of the consumer it replaces)."""
    return {name: consumer.topics for name, consumer in _core_consumers().items()}


def _core_consumers() -> dict[str, type[Consumer]]:
    # Imported here: the consumers import the composition root, which must not import them.
    from core.consumers.analyst import Analyst
    from core.consumers.executor import Executor
    from core.consumers.gatekeeper import Gatekeeper
    from core.consumers.intake import Intake
    from core.consumers.notifier import Notifier
    from core.consumers.planner import Planner
    from core.consumers.verifier import Verifier
    from core.library.consumer import Librarian

    return {"intake": Intake, "analyst": Analyst, "planner": Planner, "gatekeeper": Gatekeeper,
            "executor": Executor, "verifier": Verifier, "notifier": Notifier,
            "librarian": Librarian}
