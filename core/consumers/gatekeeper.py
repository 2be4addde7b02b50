"""The gatekeeper (``cmd.gate.eval``, ``cmd.gate.expire``): approves a waiting plan itself when
the approval policy lets it (``OPSGATE_AUTO_APPROVE``), else notes on the case who may approve
and how many must, and schedules the plan's expiry.

Whether a plan approves itself is the gate's one decision (``cases.gate.automatic_approval``);
``Gatekeeper.evaluate`` is the one step that asks it, for the consumer and ``POST /gate/eval``.
It approves through ``CaseService.approve_plan`` like a person, under the actor ``gatekeeper``,
so the policy is enforced in one place: the core. The expiry
check is an outbox row the "waiting" note writes in its own transaction, due
``OPSGATE_APPROVAL_TTL_S`` after the plan reached the gate (``deliver_after``): no thread
sleeps, a restart loses nothing. When it falls due and the case still waits on that plan at
that version, the case parks (``gate_expired``); a case decided meanwhile makes the check
stale, and it does nothing."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from core.cases.gate import automatic_approval
from core.consumers.runs import CommandRun, current_run
from core.db.case_store import as_utc
from core.domain.commands import ApprovePlan, Attribution, NoteCase, Scheduled, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import AwaitingApprovalFacts, CommandPayload, Topic, payload_as
from core.domain.policy import NO_APPROVERS, ApprovalPolicy, PlanLike, number_words, plan_risk
from core.domain.views import MovedCase
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App
    from core.cases.replies import Reply
    from core.cases.service import CaseService

log = logging.getLogger(__name__)


def waiting_note(policy: ApprovalPolicy, plan: PlanLike, requester: str) -> str:
    """"Waiting for approval by …": who may approve, how many, and who may not."""
    needed = policy.required(plan)
    count = "one approver" if needed == 1 else f"{number_words(needed)} distinct approvers"
    if needed == 2 and policy.cedar.default:
        count += f" (risk {plan_risk(plan):g} ≥ {policy.two_person_risk:g})"
    if policy.nobody_named:
        return (f"waiting: {NO_APPROVERS}, so nobody can approve this plan until someone is "
                f"named; it needs {count}")
    return (f"waiting for approval by {policy.describe_approvers()}: {count}; "
            f"{requester} requested it and cannot approve")


class Gatekeeper:
    """Consumer of ``cmd.gate.eval`` and of the expiry checks it schedules."""

    name = "gatekeeper"
    topics: tuple[str, ...] = (Topic.GATE_EVAL, Topic.GATE_EXPIRE)

    def __init__(self, app: App) -> None:
        self.cases = app.cases

    @property
    def policy(self) -> ApprovalPolicy:
        """The policy the core enforces: the gatekeeper never judges by another."""
        return self.cases.policy

    def handle(self, delivery: Delivery) -> None:
        payload = payload_as(CommandPayload, delivery.envelope.payload)
        run = current_run(self.cases, self.name, payload, CaseStatus.WAIT_GATE)
        if run is None:
            return  # decided or moved on: a stale evaluation, or a stale expiry check
        if delivery.envelope.topic == Topic.GATE_EXPIRE:
            self._expire(run, delivery)
            return
        if run.plan is None or run.plan_hash is None:
            log.warning("gatekeeper: case %s waits on no stored plan; nothing to do",
                        run.case_id)
            return
        verdict = self.evaluate(run, payload.get("correlation_id"))
        if isinstance(verdict, ApprovePlan):
            self._approve(run, delivery, verdict)
        else:
            self.cases.note(verdict, run.key, inbox_entry=delivery.inbox_entry).data()

    def evaluate(self, run: CommandRun, correlation_id: str | None,
                 attribution: Attribution | None = None) -> ApprovePlan | NoteCase:
        """The gatekeeper's one step on the plan the run waits on: its own approval when the
        policy lets the plan approve itself (``attribution``: who asked for this evaluation);
        else the note, as the run's actor, of who must still approve (it schedules the expiry)."""
        assert run.plan is not None, "a plan waits at the gate"
        assert run.plan_hash is not None
        approval = automatic_approval(self.policy, run.case_id, run.plan, run.plan_hash,
                                      version=run.version, correlation_id=correlation_id,
                                      attribution=attribution,
                                      components=run.case.get("components", ()))
        if approval is not None:
            return approval
        return awaiting_approval(self.cases, self.policy, run, correlation_id)

    def _approve(self, run: CommandRun, delivery: Delivery, cmd: ApprovePlan) -> None:
        reply = self.cases.approve_plan(cmd, run.key, inbox_entry=delivery.inbox_entry)
        if reply.moved_on:
            log.info("gatekeeper: case %s was decided first (%s)", run.case_id, reply.body)
            return
        reply.data()

    def _expire(self, run: CommandRun, delivery: Delivery) -> None:
        check = payload_as(CommandPayload, delivery.envelope.payload)
        if run.plan is None or run.plan_hash != check.get("plan_hash"):
            log.warning("gatekeeper: case %s waits on no stored plan %s; no expiry",
                        run.case_id, check.get("plan_hash"))
            return
        expire(self.cases, run, check.get("correlation_id"), delivery.inbox_entry)


def awaiting_approval(cases: CaseService, policy: ApprovalPolicy, run: CommandRun,
                      correlation_id: str | None) -> NoteCase:
    """The note that the run's plan waits for people: who may approve it and how many must,
    made as the run's actor; it schedules the plan's expiry check (``expiry_check``)."""
    assert run.plan is not None
    found = cases.proposed_plan(run.case_id, run.plan_hash)
    requester = str(found["proposed_by"]) if found else "the requester"
    check = expiry_check(policy, run)
    policy = policy.at(run.case.get("components", ()), None)
    return NoteCase(run.case_id, "awaiting_approval", run.consumer,
                    reason=waiting_note(policy, run.plan, requester),
                    meta=AwaitingApprovalFacts(
                        plan_hash=run.plan_hash, needs=policy.required(run.plan),
                        approvers=sorted(policy.approvers), requester=requester,
                        expires_at=check.deliver_after.isoformat()),
                    topic=Topic.AWAITING_APPROVAL, correlation_id=correlation_id,
                    schedule=check)


def expires_at(policy: ApprovalPolicy, run: CommandRun) -> datetime:
    """When the approval of the run's plan expires: the policy's TTL after the case reached the
    gate (its ``updated_at``: notes do not move it)."""
    return policy.approval_expires_at(as_utc(datetime.fromisoformat(str(run.case["updated_at"]))))


def expiry_check(policy: ApprovalPolicy, run: CommandRun) -> Scheduled:
    """The command that expires the run's plan if it still waits when its approval expires."""
    due = expires_at(policy, run)
    return Scheduled(Topic.GATE_EXPIRE, {"plan_hash": run.plan_hash,
                                         "expires_at": due.isoformat()}, due)


def expire(cases: CaseService, run: CommandRun, correlation_id: str | None,
           inbox_entry: tuple[str, int] | None = None) -> Reply[MovedCase] | None:
    """The run's plan expires, as the run's actor: the case parks (``gate_expired``). A check
    that comes before the plan's time (delivered early, or OPSGATE_APPROVAL_TTL_S raised since
    it was scheduled) schedules itself again for that time. Returns the move's reply; None
    when nothing moved (not yet, or another decision came first)."""
    policy = cases.policy
    due = expires_at(policy, run)
    if cases.clock() < due:
        note = NoteCase(run.case_id, "approval_expiry_due", run.consumer,
                        reason=f"the approval of plan {str(run.plan_hash)[:12]} expires at "
                               f"{due:%Y-%m-%d %H:%M:%S} UTC",
                        meta={"plan_hash": run.plan_hash, "expires_at": due.isoformat()},
                        correlation_id=correlation_id, schedule=expiry_check(policy, run))
        cases.note(note, f"{run.key}:expiry:{due.isoformat()}", inbox_entry=inbox_entry).data()
        return None
    move = TransitionCase(run.case_id, CaseEvent.GATE_EXPIRED, actor=run.consumer,
                          reason=f"approval expired after {policy.describe_ttl()}",
                          correlation_id=correlation_id, plan_hash=run.plan_hash,
                          meta={"expires_at": due.isoformat()}, expected_version=run.version)
    reply = cases.transition(move, f"{run.key}:gate_expired", inbox_entry=inbox_entry)
    if reply.moved_on:
        log.info("gatekeeper: case %s was decided before its plan expired (%s)", run.case_id,
                 reply.body)
        return None
    reply.data()
    return reply
