"""Intake (``evt.case.opened.v1``): a case that was just opened starts its analysis."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.consumers.runs import current_run, move_case
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import CommandPayload, Topic, payload_as
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App


class Intake:
    """Consumer of ``evt.case.opened.v1``: NEW → ANALYZING."""

    name = "intake"
    topics: tuple[str, ...] = (Topic.CASE_OPENED,)

    def __init__(self, app: App) -> None:
        self.cases = app.cases

    def handle(self, delivery: Delivery) -> None:
        payload = payload_as(CommandPayload, delivery.envelope.payload)
        run = current_run(self.cases, self.name, payload, CaseStatus.NEW,
                          with_plan=False)
        if run is None:
            return
        cmd = TransitionCase(run.case_id, CaseEvent.START_ANALYSIS, actor=self.name,
                             correlation_id=payload.get("correlation_id"),
                             expected_version=run.version)
        move_case(self.cases, run, cmd, delivery.inbox_entry)
