"""The loop's gatekeeper, executor and verifier as the walkthrough runs them: the consumers
themselves, each built on first use (the step runner's adapters and the verifier's metric
source are read from the settings then)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from core.consumers.executor import Executor
from core.consumers.gatekeeper import Gatekeeper
from core.consumers.verifier import Verifier

if TYPE_CHECKING:
    from core.bootstrap import App


class Consumers:
    """The consumers whose one step each walkthrough endpoint runs, for one app."""

    def __init__(self, app: App) -> None:
        self.app = app

    @cached_property
    def gatekeeper(self) -> Gatekeeper:
        return Gatekeeper(self.app)

    @cached_property
    def executor(self) -> Executor:
        return Executor(self.app)

    @cached_property
    def verifier(self) -> Verifier:
        return Verifier(self.app)
