"""The template planner (``cmd.plan.generate``): the plan that resolved the most similar verified
case in the library when there is one (``core.library``), else a plan from the catalog by
keywords in the case title (``noop`` when none match); checks it against the ChangePlan schema
and proposes it (``plan_ready``) on behalf of the human who opened the case. The LLM planner
replaces the choice with the agent issue; the way the plan enters the case stays."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from core.cases.service import CaseService
from core.consumers.runs import CommandRun, current_run, move_case
from core.domain.attempts import Replan, replan_of
from core.domain.commands import NoteCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import CommandPayload, Topic, payload_as
from core.domain.plan_templates import load_template
from core.domain.plans import plan_hash, plan_problems
from core.domain.steering import TEMPLATES, asking_title, replan_steer
from core.errors import GuardFailed, Unavailable
from core.investigate.scope import OutOfScope
from core.investigate.sources import case_looks
from core.investigate.templates import plan_for_case
from core.library.render import alike
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "noop"
KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gateway.flip.failover", ("failover", "region", "standby", "datacenter", "traffic")),
    ("k8s.rollout.canary", ("deploy", "release", "rollout", "regression", "canary", "image")),
    ("script.restart", ("restart", "hung", "hang", "stuck", "oom", "crash", "leak",
                        "unresponsive", "deadlock")),
)
"""Template → word stems that pick it; the first template with a match wins (most drastic
first: a title that says "region" and "restart" is about the region)."""


def choose_template(title: str) -> str:
    """The catalog template for a case titled ``title``."""
    words = re.findall(r"[a-z0-9]+", title.lower())
    for template, stems in KEYWORDS:
        if any(word.startswith(stem) for word in words for stem in stems):
            return template
    return DEFAULT_TEMPLATE


def learned_reason(learned: Mapping[str, Any]) -> str:
    """Why a learned plan was chosen, naming the case it came from."""
    return (f"the plan that resolved case {learned['case_id']} ({learned['title']}), the most "
            f"similar verified case ({alike(learned)})")


def made_for_case(app: App, case: Mapping[str, Any], template: str) -> dict[str, Any]:
    """``template`` made for the case's component (``plan_for_case``)."""
    looks = case_looks(case, app.catalog.current(), app.settings, app.engine)
    return plan_for_case(looks, template, None)


def case_opener(cases: CaseService, case_id: UUID) -> str | None:
    """Who opened the case: the human every plan of the case is proposed for."""
    opened = cases.timeline_of(case_id, "case_opened")
    return opened[0].actor if opened else None


@dataclass(frozen=True)
class Proposal:
    """The plan the planner proposes, the catalog template the case title picks (named when
    the plan fails the schema), and the reason and meta that go with ``plan_ready``."""

    template: str
    plan: dict[str, Any]
    reason: str
    meta: dict[str, Any]


class Planner:
    """Consumer of ``cmd.plan.generate``: PLANNING → WAIT_GATE with a template plan."""

    name = "planner"
    topics: tuple[str, ...] = (Topic.PLAN_GENERATE,)

    def __init__(self, app: App) -> None:
        self.app = app
        self.cases = app.cases
        self.library = app.library

    def handle(self, delivery: Delivery) -> None:
        payload = payload_as(CommandPayload, delivery.envelope.payload)
        run = current_run(self.cases, self.name, payload, CaseStatus.PLANNING,
                          with_plan=False)
        if run is None:
            return
        proposal = self._proposal(run)
        correlation_id = payload.get("correlation_id")
        if isinstance(proposal, str):  # the template cannot be made for the case: say why
            note = NoteCase(run.case_id, "plan_not_proposed", self.name, reason=proposal,
                            correlation_id=correlation_id)
            self.cases.note(note, run.key, inbox_entry=delivery.inbox_entry).data()
            return
        problems = plan_problems(proposal.plan)
        if problems:
            # A broken catalog entry is a bug to fix, not a message to retry: say so on the case.
            note = NoteCase(run.case_id, "plan_invalid", self.name, correlation_id=correlation_id,
                            reason=f"template {proposal.template} fails the ChangePlan schema",
                            meta={"template": proposal.template, "problems": problems})
            self.cases.note(note, run.key, inbox_entry=delivery.inbox_entry).data()
            return
        self._propose(run, proposal, correlation_id, delivery)

    def _proposal(self, run: CommandRun) -> Proposal | str:
        """After a person's Reject or resume, what their words ask (``core.domain.steering``),
        never a plan the case declined unless they asked for a retry; else the learned plan when
        the library has a valid one for the case's title, else the catalog template the title
        picks, made for the case's component when there is a service catalog
        (``core.investigate.templates``); why not, when it cannot be made."""
        replan = replan_of(self.cases.moves(run.case_id))
        proposal = self._chosen(run, replan)
        if isinstance(proposal, str) or replan is None or replan.resumed.retry \
                or plan_hash(proposal.plan) not in {a.plan_hash for a in replan.declined}:
            return proposal
        asking = {**load_template("noop"), "title": asking_title(replan)}
        return Proposal("noop", asking, "the plan the words pick was declined on the case",
                        {"template": "noop"})

    def _chosen(self, run: CommandRun, replan: Replan | None) -> Proposal | str:
        steer = replan_steer(replan)
        wanted = TEMPLATES.get(steer.want) if steer.want else None
        template = wanted or choose_template(run.case["title"])
        source = "the person's words" if wanted else "the case title"
        learned = None if replan is not None else self.library.best_plan_for(
            str(run.case["title"]), exclude=run.case_id)
        if learned is not None and not plan_problems(learned["plan"]):
            # Evidence before templates: the plan that resolved the most similar verified case.
            return Proposal(template, learned["plan"], learned_reason(learned),
                            {"learned_from": learned["case_id"]})
        try:
            made = made_for_case(self.app, run.case, template)
        except (OutOfScope, Unavailable) as refused:
            return f"no plan proposed from the template {template}: {refused.message}"
        if self.app.catalog.current().components:
            return Proposal(template, made["plan"], f"template {template} chosen from {source}, "
                            f"made for {made['made_for']}", {"template": template})
        # No catalog: the template as written, its checks reading the default scope's series.
        return Proposal(template, made["plan"], f"template {template} chosen from {source}",
                        {"template": template})

    def _propose(self, run: CommandRun, proposal: Proposal, correlation_id: str | None,
                 delivery: Delivery) -> None:
        """``plan_ready`` with the plan, on behalf of the human who opened the case."""
        cmd = TransitionCase(run.case_id, CaseEvent.PLAN_READY, actor=self.name,
                             plan=proposal.plan, reason=proposal.reason, meta=proposal.meta,
                             correlation_id=correlation_id, expected_version=run.version,
                             requester=case_opener(self.cases, run.case_id))
        try:
            move_case(self.cases, run, cmd, delivery.inbox_entry)
        except GuardFailed as refused:
            # Recorded with the inbox mark (one timeline row says why): a retry only replays it.
            log.warning("planner: case %s: plan_ready refused: %s", run.case_id, refused)
