"""The analyst placeholder (``cmd.analysis.run``): until an analyst agent is configured, analysis
ends at once with a note saying so, and the case goes on to planning."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from core.consumers.runs import current_run
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

NO_ANALYST = "no analyst is configured: planning from the template catalog"


class Analyst:
    """Consumer of ``cmd.analysis.run``: ANALYZING → PLANNING."""

    name = "analyst"
    topics: tuple[str, ...] = (Topic.ANALYSIS_RUN,)

    def __init__(self, app: App) -> None:
        self.cases = app.cases

    def handle(self, delivery: Delivery) -> None:
        payload = delivery.envelope.payload
        run = current_run(self.cases, self.name, payload, CaseStatus.ANALYZING,
                          with_plan=False)
        if run is None:
            return
        cmd = TransitionCase(run.case_id, CaseEvent.ANALYSIS_DONE, actor=self.name,
                             reason=NO_ANALYST, meta={"analyst": "none"},
                             correlation_id=payload.get("correlation_id"),
                             expected_version=run.version)
        reply = self.cases.transition(cmd, run.key, inbox_entry=delivery.inbox_entry)
        if reply.status in (409, 412):
            log.info("analyst: case %s moved on first (%s)", run.case_id, reply.body)
            return
        reply.data()
