"""The notifier (``evt.*``): turns each fact about a case into a short update in the case's chat
thread. Every post goes through the gateway with the message id as business key, so a
redelivered event never posts twice; the Slack front end plugs in its own ``ChatSink``. Without
a chat (no Slack) a post is held, never recorded as sent; a notifier that can post hands the
held messages out again when it starts. What it says is plain words (``core.chat.Said``); the
chat's sink draws them in its own format (Slack: mrkdwn, escaped, in the bot)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from core.chat import (
    ChatSink,
    RecordingSink,
    Said,
    can_post,
    deliverable,
    said_from_json,
    said_to_json,
)
from core.consumers.notifier_text import alert_text, findings_text
from core.domain.messages import (
    ApprovalRecordedPayload,
    AwaitingApprovalPayload,
    OpenedPayload,
    StepResultPayload,
    Topic,
    TransitionPayload,
    VerifyWaitingPayload,
    payload_as,
)
from core.gateway import ToolCall, session_of
from core.messaging.consumer import Delivery, release_held

if TYPE_CHECKING:
    from core.bootstrap import App

__all__ = ["ChatSink", "Notifier", "RecordingSink", "render"]

log = logging.getLogger(__name__)

POST_WAIT_S = 5.0  # how long a duplicate waits for the first delivery's post to finish
# The transition fact of these moves says less than the plan event emitted beside it.
_TOLD_BY_PLAN_EVENTS = frozenset({"plan_ready", "gate_approved", "gate_rejected",
                                  "gate_expired"})

Payload = Mapping[str, Any]


def _short(digest: object) -> str:
    return str(digest or "")[:12]


def _opened(raw: Payload) -> str:
    p = payload_as(OpenedPayload, raw)
    return f"Case opened by {p['actor']}: {p['title']} ({p['severity']})"


def _moved(raw: Payload) -> str | None:
    p = payload_as(TransitionPayload, raw)
    if p["event"] in _TOLD_BY_PLAN_EVENTS:
        return None
    line = f"{p['from']} → {p['to']}: {p['event']} by {p['actor']}"
    return f"{line} — {p['reason']}" if p.get("reason") else line


def _proposed(raw: Payload) -> str:
    p = payload_as(TransitionPayload, raw)
    return (f"Plan {_short(p.get('plan_hash'))} proposed by {p['actor']}; waiting at "
            "the gate")


def _approval(raw: Payload) -> str:
    p = payload_as(ApprovalRecordedPayload, raw)
    return (f"{p['actor']} approved plan {_short(p['plan_hash'])}; "
            f"{p['needs']} more approval(s) needed")


def _awaiting(raw: Payload) -> str:
    p = payload_as(AwaitingApprovalPayload, raw)
    return f"Plan {_short(p['plan_hash'])}: {p['reason']}"


def _approved(raw: Payload) -> str:
    p = payload_as(TransitionPayload, raw)
    # The reason names every approver ("approved by bob, carol"); the actor only the last one.
    how = p.get("reason") or f"approved by {p['actor']}"
    return f"Plan {_short(p.get('plan_hash'))} {how}; executing"


def _rejected(raw: Payload) -> str:
    p = payload_as(TransitionPayload, raw)
    return (f"Plan {_short(p.get('plan_hash'))} rejected by {p['actor']}: "
            f"{p.get('reason') or ''}")


def _expired(raw: Payload) -> str:
    p = payload_as(TransitionPayload, raw)
    why = p.get("reason") or "approval expired"
    return f"Plan {_short(p.get('plan_hash'))}: {why}; the case is parked — ask for a fresh plan"


def _step(raw: Payload) -> str:
    p = payload_as(StepResultPayload, raw)
    mark = "✓" if p["ok"] else "✗"
    return f"{mark} {p['reason']}"


def _verify_waiting(raw: Payload) -> str:
    p = payload_as(VerifyWaitingPayload, raw)
    observed = p["observed"]
    now = f"now {observed:g}" if isinstance(observed, int | float) else p["reason"]
    if p.get("stand_in") and isinstance(observed, int | float):
        now = f"{now}, a stand-in reading"  # the reason says so itself
    deadline = str(p["deadline"] or "")
    with suppress(ValueError):
        deadline = f"{datetime.fromisoformat(deadline).astimezone(UTC):%H:%M:%S} UTC"
    what = p.get("waiting_for") or "the verify block to hold"
    return (f"Verifying plan {_short(p['plan_hash'])}: waiting for {what} ({now}); "
            f"deadline {deadline}")


_RENDERERS: dict[str, Callable[[Payload], str | Said | None]] = {
    Topic.CASE_OPENED: _opened,
    Topic.CASE_TRANSITION: _moved,
    Topic.PLAN_PROPOSED: _proposed,
    Topic.APPROVAL_RECORDED: _approval,
    Topic.AWAITING_APPROVAL: _awaiting,
    Topic.PLAN_APPROVED: _approved,
    Topic.PLAN_REJECTED: _rejected,
    Topic.PLAN_EXPIRED: _expired,
    Topic.EXEC_STEP_RESULT: _step,
    Topic.VERIFY_WAITING: _verify_waiting,
    Topic.ANALYSIS_FINDINGS: findings_text,  # the analyst's findings (notifier_text)
    Topic.ALERT_NOTED: alert_text,  # Alertmanager's alerts on the case (notifier_text)
}


def render(topic: str, payload: Payload) -> Said | None:
    """What one event says in the case's thread; None when it adds nothing."""
    renderer = _RENDERERS.get(topic)
    said = None if renderer is None else renderer(payload)
    return (said,) if isinstance(said, str) else said


class Notifier:
    """Consumer of the ``evt.*`` topics: one chat post per event worth telling."""

    name = "notifier"
    topics: tuple[str, ...] = tuple(_RENDERERS)

    def __init__(self, app: App, sink: ChatSink | None = None) -> None:
        self.gateway = app.gateway
        self.sink = sink or app.chat
        if can_post(self.sink):  # what a process without chat held, this one posts
            release_held(app.engine, self.name)

    def handle(self, delivery: Delivery) -> None:
        envelope = delivery.envelope
        post = self.post_of(envelope.topic, envelope.payload)
        if post is None:
            return
        deliverable(self.sink)  # no chat: the message is held, nothing claimed
        case_id = str(envelope.payload.get("case_id", envelope.key))
        args: dict[str, Any] = {"case_id": case_id, "thread_key": case_id, **post}
        call = ToolCall(tool="chat.post", args=args,
                        actor=self.name, session_id=session_of(case_id),
                        business_key=f"message:{envelope.message_id}")
        # Not idempotent: a post that may have happened without its result being stored is
        # left for reconciliation rather than posted again.
        result = self.gateway.run(call, self._post, wait_s=POST_WAIT_S)
        # Still in progress elsewhere, or refused: raise so the runner retries, then buries.
        result.raise_for_error(f"chat post for message {envelope.message_id}")

    def post_of(self, topic: str, payload: Payload) -> dict[str, Any] | None:
        """What one event posts, as the chat post's arguments: the core's words (``said``),
        which the sink draws; None when it adds nothing. A chat front end draws its own (the
        Slack bot: the plan with its buttons)."""
        said = render(topic, payload)
        return None if said is None else {"said": said_to_json(said)}

    def _post(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return self.sink.say(str(args["case_id"]), said_from_json(args["said"]),
                             thread_key=str(args["thread_key"]))
