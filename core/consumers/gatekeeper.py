"""The gatekeeper (``cmd.gate.eval``): approves a waiting plan itself when the approval policy
lets it (``OPSGATE_AUTO_APPROVE``), else notes on the case who may approve and how many must.

It approves through ``CaseService.approve_plan`` like a person, under the actor ``gatekeeper``,
so the policy is enforced in one place: the core."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from core.consumers.runs import PlanRun, current_run
from core.domain.commands import ApprovePlan, NoteCase
from core.domain.fsm import CaseStatus
from core.domain.messages import Topic
from core.domain.policy import AUTO_APPROVER, ApprovalPolicy, PlanLike, plan_risk
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App
    from core.service import CaseService

log = logging.getLogger(__name__)


def waiting_note(policy: ApprovalPolicy, plan: PlanLike, requester: str) -> str:
    """"Waiting for approval by …": who may approve, how many, and who may not."""
    needed = policy.required(plan)
    count = ("two distinct approvers (risk "
             f"{plan_risk(plan):g} ≥ {policy.two_person_risk:g})" if needed == 2
             else "one approver")
    return (f"waiting for approval by {policy.describe_approvers()}: {count}; "
            f"{requester} requested it and cannot approve")


class Gatekeeper:
    """Consumer of ``cmd.gate.eval``."""

    name = "gatekeeper"
    topics: tuple[str, ...] = (Topic.GATE_EVAL,)

    def __init__(self, app: App) -> None:
        self.cases = app.cases

    @property
    def policy(self) -> ApprovalPolicy:
        """The policy the core enforces: the gatekeeper never judges by another."""
        return self.cases.policy

    def handle(self, delivery: Delivery) -> None:
        payload = delivery.envelope.payload
        run = current_run(self.cases, self.name, payload, CaseStatus.WAIT_GATE)
        if run is None:
            return
        if run.plan is None or run.plan_hash is None:
            log.warning("gatekeeper: case %s waits on no stored plan; nothing to do",
                        run.case_id)
            return
        if self.policy.auto_approves(run.plan):
            self._approve(run, delivery, payload.get("correlation_id"))
        else:
            self._wait(run, delivery, payload.get("correlation_id"))

    def _approve(self, run: PlanRun, delivery: Delivery, correlation_id: str | None) -> None:
        assert run.plan_hash is not None
        cmd = ApprovePlan(run.case_id, run.plan_hash, AUTO_APPROVER,
                          correlation_id=correlation_id, expected_version=run.version)
        reply = self.cases.approve_plan(cmd, run.key, inbox_entry=delivery.inbox_entry)
        if reply.status in (409, 412):
            log.info("gatekeeper: case %s was decided first (%s)", run.case_id, reply.body)
            return
        reply.data()

    def _wait(self, run: PlanRun, delivery: Delivery, correlation_id: str | None) -> None:
        note = awaiting_approval(self.cases, self.policy, run, correlation_id)
        self.cases.note(note, run.key, inbox_entry=delivery.inbox_entry).data()


def awaiting_approval(cases: CaseService, policy: ApprovalPolicy, run: PlanRun,
                      correlation_id: str | None) -> NoteCase:
    """The note that the run's plan waits for people: who may approve it and how many must,
    made as the run's actor."""
    assert run.plan is not None
    found = cases.proposed_plan(run.case_id, run.plan_hash)
    requester = str(found["proposed_by"]) if found else "the requester"
    return NoteCase(run.case_id, "awaiting_approval", run.consumer,
                    reason=waiting_note(policy, run.plan, requester),
                    meta={"plan_hash": run.plan_hash, "needs": policy.required(run.plan),
                          "approvers": sorted(policy.approvers), "requester": requester},
                    topic=Topic.AWAITING_APPROVAL, correlation_id=correlation_id)
