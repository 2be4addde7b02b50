"""The agent-driven planner (``cmd.plan.generate``), replacing the template planner when the
agent's extensions are plugged in: the same stale-command check and inbox dedup (the runner marks
the inbox after ``handle``; every effect replays by its intent key), but the plan comes from an
agent turn on the case's thread, proposed through the gateway on behalf of the case's opener."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from uuid import UUID

from agent.prompts import plan_request, steps_in_words
from agent.runner import Agent
from core.consumers.planner import case_opener
from core.consumers.runs import current_run
from core.domain.attempts import replan_of
from core.domain.commands import NoteCase
from core.domain.fsm import CaseStatus
from core.domain.messages import CommandPayload, Topic, payload_as
from core.domain.views import CaseView
from core.errors import KeyReuse, Unavailable
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)


class AgentPlanner:
    """Consumer of ``cmd.plan.generate``: an agent turn that ends with a proposed plan (the case
    goes to WAIT_GATE), or with a note saying why not (the case stays in PLANNING)."""

    name = "planner"
    topics: tuple[str, ...] = (Topic.PLAN_GENERATE,)

    def __init__(self, app: App, agent: Agent | None = None) -> None:
        self.app = app
        # A chat turn may hold the case's lock while a real model thinks: wait up to a lease.
        self.agent = agent if agent is not None else Agent(
            app, lock_wait_s=app.settings.gateway_lease_s)

    def handle(self, delivery: Delivery) -> None:
        payload = payload_as(CommandPayload, delivery.envelope.payload)
        run = current_run(self.app.cases, self.name, payload, CaseStatus.PLANNING,
                          with_plan=False)
        if run is None:
            return
        result = self.agent.run_turn(run.case_id, self._request(run.case_id, run.case),
                                     requester=case_opener(self.app.cases, run.case_id),
                                     correlation_id=payload.get("correlation_id"),
                                     trigger="planner", post_failures=True,
                                     still_wanted=lambda: self._still_planning(run.case_id,
                                                                               run.version))
        if result.outcome in ("busy", "unavailable"):
            raise Unavailable(f"planner: case {run.case_id}: {result.reply}")  # retried later
        log.info("planner: case %s: %s (%s)", run.case_id, result.outcome, result.reply[:120])
        if result.outcome in ("answered", "budget") and self._still_planning(run.case_id,
                                                                           run.version):
            # The model ended its turn without a plan: say so on the case, with its words.
            note = NoteCase(run.case_id, "plan_not_proposed", self.name,
                            reason=result.reply[:500], meta={"outcome": result.outcome},
                            correlation_id=payload.get("correlation_id"))
            reply = self.app.cases.note(note, f"{run.key}:plan_not_proposed")
            if not reply.ok and not isinstance(reply.error, KeyReuse):
                reply.data()  # raises: the runner retries; a first note of this run stays

    def _request(self, case_id: UUID, case: CaseView) -> str:
        """The turn's request: the case, and after a person's resume their words, why it parked
        and the plan that failed or was rejected (its title and steps)."""
        replan = replan_of(self.app.cases.moves(case_id))
        failed = None if replan is None or replan.failed is None else \
            self.app.cases.proposed_plan(case_id, replan.failed.plan_hash)
        title = None if failed is None else str(failed["plan"].get("title") or "")
        steps = "" if failed is None else steps_in_words(failed["plan"])
        return plan_request(case, replan, title, steps)

    def _still_planning(self, case_id: UUID, version: int) -> bool:
        case = self.app.cases.get_case(case_id)
        return bool(case["status"] == CaseStatus.PLANNING and case["version"] == version)
