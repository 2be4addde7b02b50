"""Which outbox messages each accepted move emits: pure, so the FSM's consequences are testable.

Every move emits ``evt.case.transition.v1``; some also emit the commands that drive the next
stage (``cmd.*``) and the facts other services follow (``evt.plan.*``). The key is the case id,
so consumers can keep per-case order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from core.domain.fsm import Accepted, CaseEvent, CaseStatus


class Topic:
    """Every outbox topic: the FSM's facts and commands, and the notes other services emit."""

    CASE_OPENED = "evt.case.opened.v1"
    CASE_TRANSITION = "evt.case.transition.v1"
    PLAN_PROPOSED = "evt.plan.proposed.v1"
    PLAN_APPROVED = "evt.plan.approved.v1"
    PLAN_REJECTED = "evt.plan.rejected.v1"
    PLAN_EXPIRED = "evt.plan.expired.v1"  # nobody decided in time: the case parked
    APPROVAL_RECORDED = "evt.plan.approval_recorded.v1"  # a yes that is not yet enough
    AWAITING_APPROVAL = "evt.plan.awaiting_approval.v1"  # the gatekeeper waits for humans
    ANALYSIS_RUN = "cmd.analysis.run"
    PLAN_GENERATE = "cmd.plan.generate"
    GATE_EVAL = "cmd.gate.eval"
    GATE_EXPIRE = "cmd.gate.expire"  # scheduled: the plan still waiting then expires
    EXEC_RUN = "cmd.exec.run"
    VERIFY_RUN = "cmd.verify.run"
    EXEC_STEP_RESULT = "evt.exec.step_result.v1"  # one attempt of a plan or rollback step
    VERIFY_WAITING = "evt.verify.waiting.v1"  # verification waits for its window or condition
    ANALYSIS_FINDINGS = "evt.analysis.findings.v1"  # the analyst's findings, noted on the case
    ALERT_NOTED = "evt.alert.noted.v1"  # Alertmanager's alerts of the case, one line each
    CHAT_PINNED = "evt.chat.pinned.v1"  # a chat message pinned to the case (the card shows it)


_FOLLOW_UPS: dict[CaseEvent, tuple[str, ...]] = {
    CaseEvent.START_ANALYSIS: (Topic.ANALYSIS_RUN,),
    CaseEvent.PLAN_READY: (Topic.PLAN_PROPOSED, Topic.GATE_EVAL),
    CaseEvent.GATE_APPROVED: (Topic.PLAN_APPROVED, Topic.EXEC_RUN),
    CaseEvent.GATE_REJECTED: (Topic.PLAN_REJECTED,),
    CaseEvent.GATE_EXPIRED: (Topic.PLAN_EXPIRED,),
    CaseEvent.EXEC_DONE: (Topic.VERIFY_RUN,),
}


@dataclass(frozen=True)
class Message:
    """One row the transition writes to the outbox."""

    topic: str
    key: str
    payload: dict[str, Any] = field(default_factory=dict)
    deliver_after: datetime | None = None  # a scheduled command: the relay waits until then


@dataclass(frozen=True)
class MoveContext:
    """What the messages of one accepted move say besides the move itself."""

    case_id: UUID
    version: int
    actor: str
    correlation_id: str | None
    plan_hash: str | None = None
    reason: str | None = None  # why the move was made: the chat thread shows it


def follow_up_topics(event: CaseEvent, target: CaseStatus) -> tuple[str, ...]:
    """The topics an accepted ``event`` emits besides the transition fact."""
    topics = _FOLLOW_UPS.get(event, ())
    if target is CaseStatus.PLANNING:
        topics = (*topics, Topic.PLAN_GENERATE)
    return topics


def messages_for(move: Accepted, ctx: MoveContext) -> list[Message]:
    """The outbox messages of one accepted move, the transition fact first."""
    base: dict[str, Any] = {
        "case_id": str(ctx.case_id),
        "version": ctx.version,
        "event": str(move.event),
        "from": str(move.source),
        "to": str(move.target),
        "actor": ctx.actor,
        "correlation_id": ctx.correlation_id,
    }
    if ctx.plan_hash is not None:
        base["plan_hash"] = ctx.plan_hash
    if ctx.reason is not None:
        base["reason"] = ctx.reason
    topics = (Topic.CASE_TRANSITION, *follow_up_topics(move.event, move.target))
    return [Message(topic, str(ctx.case_id), dict(base)) for topic in topics]


def opened_message(case_id: UUID, title: str, severity: str, actor: str,
                   correlation_id: str | None) -> Message:
    """The fact that a case was opened."""
    payload = {"case_id": str(case_id), "version": 0, "title": title, "severity": severity,
               "actor": actor, "correlation_id": correlation_id}
    return Message(Topic.CASE_OPENED, str(case_id), payload)
