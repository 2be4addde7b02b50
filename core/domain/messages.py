"""Which outbox messages each accepted move emits, and the shape of every message's payload:
pure, so the FSM's consequences are testable.

Every move emits ``evt.case.transition.v1``; some also emit the commands that drive the next
stage (``cmd.*``) and the facts other services follow (``evt.plan.*``). The key is the case id,
so consumers can keep per-case order. Each payload shape is a TypedDict built here and read by
the consumers through ``payload_as``; the JSON on the wire is the dict itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NotRequired, TypedDict, TypeVar, cast
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


class CaseRef(TypedDict):
    """What every payload starts with: the case, its version then, the request behind it."""

    case_id: str
    version: int
    correlation_id: str | None


class OpenedPayload(CaseRef):
    """``evt.case.opened.v1``."""

    title: str
    severity: str
    actor: str


# Every accepted move's messages: ``evt.case.transition.v1``, the ``evt.plan.*`` decisions and
# the commands of the next stage (``cmd.analysis.run``, ``cmd.plan.generate``,
# ``cmd.gate.eval``, ``cmd.exec.run``, ``cmd.verify.run``). The functional form because
# "from" is a keyword.
TransitionPayload = TypedDict("TransitionPayload", {
    "case_id": str, "version": int, "event": str, "from": str, "to": str, "actor": str,
    "correlation_id": str | None, "plan_hash": NotRequired[str], "reason": NotRequired[str]})


class NotePayload(CaseRef):
    """The event of a note (``NoteCase.topic``); the note's facts (its meta) follow these keys."""

    event: str
    actor: str
    reason: str | None


class ApprovalRecordedFacts(TypedDict):
    """What a yes that is not yet enough records (the service writes it)."""

    plan_hash: str
    approvers: list[str]
    needs: int | None


class ApprovalRecordedPayload(NotePayload, ApprovalRecordedFacts):
    """``evt.plan.approval_recorded.v1``: a yes that is not yet enough."""


class AwaitingApprovalFacts(TypedDict):
    """Who may approve the plan, how many must, and when the approval expires (the
    gatekeeper's note)."""

    plan_hash: str | None
    needs: int
    approvers: list[str]
    requester: str
    expires_at: str


class AwaitingApprovalPayload(NotePayload, AwaitingApprovalFacts):
    """``evt.plan.awaiting_approval.v1``: the gatekeeper waits for people."""


class StepResultFacts(TypedDict):
    """One attempt of a plan or rollback step (the executor's note)."""

    phase: str
    step: int
    attempt: int
    attempts_allowed: int
    action: str
    ok: bool
    duration_s: float
    output: str
    plan_hash: str | None
    refused: NotRequired[str]
    detail: NotRequired[dict[str, Any]]


class StepResultPayload(NotePayload, StepResultFacts):
    """``evt.exec.step_result.v1``."""


class Observation(TypedDict):
    """What one verification reading saw."""

    state: str  # held, pending or cannot (core.evidence.outcome.State)
    passed: bool
    reason: str | None  # always said; typed as a note's reason, which a waiting note's repeats
    observed: float | None
    at: NotRequired[str]  # ISO 8601, UTC
    waiting_for: NotRequired[str]
    stand_in: NotRequired[bool]  # read from a stand-in table (OPSGATE_STATIC_METRICS)
    series_read: NotRequired[bool]  # held on metric checks that read the component's series
    timed_out: NotRequired[bool]  # Prometheus, or the wait for its answer, timed out
    timeouts: NotRequired[int]  # a waiting reading's: readings in a row that timed out, with it


class VerifyReading(Observation):
    """One reading of a plan's verification as its note records it (``verify_result``)."""

    plan_hash: str | None
    reading: int


class VerifyWaitingFacts(VerifyReading):
    """A reading that waits (``verify_reading``): since when it watches, until when, and when
    the next reading is."""

    since: str
    deadline: str
    next_reading_at: str


class VerifyWaitingPayload(NotePayload, VerifyWaitingFacts):
    """``evt.verify.waiting.v1``: the first reading of a verification that waits."""


class Evidence(TypedDict):
    """What the metrics said of a case (``core.analysis.findings.find``)."""

    findings: list[dict[str, Any]]  # metric, summary, confidence, query, link, …; best first
    checked: list[str]  # the metrics read
    missing: list[dict[str, str]]  # metric, reason: the metrics that could not be read


class Recall(TypedDict):
    """What the library recalls for a case's title (``Library.recall``)."""

    similar_cases: list[dict[str, Any]]  # case_id, title, resolved_by, score, …
    runbooks: list[dict[str, Any]]  # title, path, score


class FindingsFacts(Evidence, Recall):
    """The analyst's evidence on a case: the metrics' findings and the library's recall."""

    source: str  # the metric source's type; "none" without one
    looked: NotRequired[list[str]]  # what the looks at the components found, one line each


class FindingsPayload(NotePayload, FindingsFacts):
    """``evt.analysis.findings.v1``."""


class AlertSaid(TypedDict):
    """What an alert note says of one Alertmanager alert."""

    fingerprint: str
    starts_at: str
    alertname: str
    summary: str
    url: str  # its Prometheus graph ("" without one)


class AlertGroupFacts(TypedDict):
    """The alert group and the recurrence of it a note is about."""

    group: str  # the group's digest, shortened
    recurrence: int


class AlertsOpeningFacts(AlertGroupFacts):
    """The alerts that opened a recurrence's case (``alert_firing``; ``alert_recurrence``
    from the second recurrence on, naming the previous case and the group's title)."""

    alerts: list[AlertSaid]  # the first few
    alert_count: int
    previous_case_id: NotRequired[str]
    title: NotRequired[str]


class AlertSeenFacts(AlertGroupFacts, AlertSaid):
    """One alert new in the group (``alert_new``)."""


class AlertResolvedFacts(AlertSeenFacts):
    """One alert that resolved (``alert_resolved``)."""

    ends_at: str | None


class AlertsOpeningPayload(NotePayload, AlertsOpeningFacts):
    """``evt.alert.noted.v1`` of an ``alert_firing`` or ``alert_recurrence`` note."""


class AlertSeenPayload(NotePayload, AlertSeenFacts):
    """``evt.alert.noted.v1`` of an ``alert_new`` note."""


class AlertResolvedPayload(NotePayload, AlertResolvedFacts):
    """``evt.alert.noted.v1`` of an ``alert_resolved`` note."""


class ChatPinnedFacts(TypedDict):
    """The chat message pinned to the case (the Slack front end's note)."""

    author: str
    channel: str
    ts: str
    thread_ts: str
    permalink: str | None


class ChatPinnedPayload(NotePayload, ChatPinnedFacts):
    """``evt.chat.pinned.v1``."""


class CommandPayload(CaseRef):
    """What a ``cmd.*`` consumer reads: a move's command, or one a note scheduled
    (``cmd.gate.expire``, the next ``cmd.verify.run`` reading) with the scheduling note's event
    and its own facts. The intake reads ``evt.case.opened.v1`` as its command too."""

    event: NotRequired[str]
    plan_hash: NotRequired[str | None]
    reading: NotRequired[int]  # cmd.verify.run: which reading (the move's command: the first)
    timeouts: NotRequired[int]  # cmd.verify.run: readings in a row before it that timed out
    expires_at: NotRequired[str]  # cmd.gate.expire: when the plan's approval expires


Payload = OpenedPayload | TransitionPayload | NotePayload | CommandPayload
"""Every shape an outbox message's payload has (the wire: JSON of these keys)."""


P = TypeVar("P", bound=Payload)


def payload_as(shape: type[P], payload: Mapping[str, Any]) -> P:
    """A delivered payload (JSON from the outbox row) read as the shape its topic has, so
    ``mypy`` checks every key a consumer reads against the shape the builders here write."""
    return cast(P, payload)


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
    payload: Payload
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
    base: TransitionPayload = {
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
    return [Message(topic, str(ctx.case_id), base.copy()) for topic in topics]


def opened_message(case_id: UUID, title: str, severity: str, actor: str,
                   correlation_id: str | None) -> Message:
    """The fact that a case was opened."""
    payload: OpenedPayload = {"case_id": str(case_id), "version": 0, "title": title,
                              "severity": severity, "actor": actor,
                              "correlation_id": correlation_id}
    return Message(Topic.CASE_OPENED, str(case_id), payload)


def note_message(topic: str, note: NotePayload, facts: Mapping[str, Any]) -> Message:
    """The event of a note: its common keys, then the note's own facts (its meta)."""
    payload = cast(NotePayload, {**note, **facts})
    return Message(topic, note["case_id"], payload)


def scheduled_message(topic: str, ref: CaseRef, event: str, facts: Mapping[str, Any],
                      deliver_after: datetime) -> Message:
    """A command a note leaves for later: the case at the note's version, the note's event,
    then the command's own facts."""
    payload = cast(CommandPayload, {"case_id": ref["case_id"], "version": ref["version"],
                                    "event": event, "correlation_id": ref["correlation_id"],
                                    **facts})
    return Message(topic, ref["case_id"], payload, deliver_after=deliver_after)
