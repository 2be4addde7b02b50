"""Commands the case service accepts: what a caller asks for, before anything is decided."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from core.domain.fsm import CaseEvent

SEVERITIES = ("SEV1", "SEV2", "SEV3", "SEV4")

Attribution = dict[str, str]
"""What the timeline keeps beside a command's actor: the API principal that sent it and the
actor its body stated (``{"principal": "svc-ci", "stated_actor": "sre@acme"}``). It grants
nothing; empty for the Slack front end and the consumers."""


@dataclass(frozen=True)
class Fence:
    """A fence token of one agent session: writes with a token below the latest are stale."""

    session_id: str
    token: int


@dataclass(frozen=True)
class ChatThread:
    """A chat thread a case is opened from (Slack: the workspace, the channel and the thread's
    root message); it becomes the case's thread in the transaction that opens the case."""

    team: str
    channel: str
    thread_ts: str


@dataclass(frozen=True)
class OpenCase:
    title: str
    actor: str
    severity: str = "SEV3"
    tenant: str | None = None
    correlation_id: str | None = None
    attribution: Attribution = field(default_factory=dict)
    thread: ChatThread | None = None
    # The catalog components the case concerns. Not part of the intent: an alert's are resolved
    # through the catalog as it is at each delivery, and a redelivery after a catalog change is
    # the same open (the first open's components stand).
    components: tuple[str, ...] = ()

    def intent(self) -> dict[str, Any]:
        """What identifies the request for idempotency (not transport metadata)."""
        thread = {} if self.thread is None else {"thread": asdict(self.thread)}
        return {"op": "open_case", "title": self.title, "actor": self.actor,
                "severity": self.severity, "tenant": self.tenant, **_attributed(self), **thread}


@dataclass(frozen=True)
class TransitionCase:
    case_id: UUID
    event: CaseEvent
    actor: str
    reason: str | None = None
    correlation_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    expected_version: int | None = None
    plan: dict[str, Any] | None = None
    plan_hash: str | None = None
    fence: Fence | None = None
    requester: str | None = None  # plan_ready: the human the plan is for (default: the actor)
    attribution: Attribution = field(default_factory=dict)

    def intent(self) -> dict[str, Any]:
        """What identifies the request for idempotency: everything but the correlation id and
        the fence, which a faithful retry may carry anew."""
        body = asdict(self)
        body.pop("correlation_id")
        body.pop("fence")
        if self.requester is None:
            body.pop("requester")  # keeps the fingerprints of requests made before it existed
        if not self.attribution:
            body.pop("attribution")  # likewise
        body["case_id"] = str(self.case_id)
        body["event"] = str(self.event)
        return {"op": "transition", **body}


@dataclass(frozen=True)
class Scheduled:
    """A command a note leaves in the outbox for later (a verification's next reading): the
    relay does not publish it before ``deliver_after``."""

    topic: str
    payload: dict[str, Any]
    deliver_after: datetime


@dataclass(frozen=True)
class NoteCase:
    """A fact about a case that does not move it (a step's result, an approval that is not yet
    enough, a verification reading): one timeline row, optionally one outbox event (``topic``)
    and one command scheduled for later (``schedule``), all in one transaction."""

    case_id: UUID
    event: str
    actor: str
    reason: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)  # the facts (messages.*Facts)
    topic: str | None = None
    correlation_id: str | None = None
    schedule: Scheduled | None = None

    def intent(self) -> dict[str, Any]:
        body = asdict(self)
        body.pop("correlation_id")
        body["case_id"] = str(self.case_id)
        if self.schedule is None:
            body.pop("schedule")  # keeps the fingerprints of notes made before it existed
        else:
            when = self.schedule.deliver_after.astimezone(UTC).isoformat()
            body["schedule"] = {**body["schedule"], "deliver_after": when}
        return {"op": "note", **body}


@dataclass(frozen=True)
class ApprovePlan:
    """One approver's yes to the plan (by hash) a case waits on at the gate. When the policy is
    then satisfied the case moves to EXECUTING in the same transaction."""

    case_id: UUID
    plan_hash: str
    approver: str
    correlation_id: str | None = None
    expected_version: int | None = None  # the case version the approver saw (a Slack button's)
    attribution: Attribution = field(default_factory=dict)

    def intent(self) -> dict[str, Any]:
        return {"op": "approve_plan", "case_id": str(self.case_id), "plan_hash": self.plan_hash,
                "approver": self.approver, "expected_version": self.expected_version,
                **_attributed(self)}


@dataclass(frozen=True)
class RejectPlan:
    """One approver's no to the plan a case waits on: the case parks with ``reason``."""

    case_id: UUID
    plan_hash: str
    approver: str
    reason: str
    correlation_id: str | None = None
    expected_version: int | None = None
    attribution: Attribution = field(default_factory=dict)

    def intent(self) -> dict[str, Any]:
        return {"op": "reject_plan", "case_id": str(self.case_id), "plan_hash": self.plan_hash,
                "approver": self.approver, "reason": self.reason,
                "expected_version": self.expected_version, **_attributed(self)}


def _attributed(cmd: OpenCase | ApprovePlan | RejectPlan) -> dict[str, Any]:
    """The attribution's part of an intent; none when empty, so fingerprints of requests made
    before it existed stay the same."""
    return {"attribution": dict(cmd.attribution)} if cmd.attribution else {}
