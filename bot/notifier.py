"""The notifier as Slack shows it: one case card per case, kept current in place, and a quiet
thread. The card (``bot.card``, kept by ``bot.card_keeper``) is posted when the case opens and
updated on every fact about the case; the thread gets only what asks for a human or records a
decision: the plan message with ``Approve`` and ``Reject`` (replaced in place, ``chat.update``,
when the gate decides, the plan's approval expires, or a first yes of two is recorded: "1 of 2"),
PARKED with why, CLOSED, and a step whose outcome is unknown (which target to check).

It replaces the core notifier by name (``Extensions.consumers["notifier"]``); posts and updates
go through the gateway like the core's, so a redelivered event never posts twice. Besides the
core's topics it follows pins (``evt.chat.pinned.v1``) and each verification reading's command
(``cmd.verify.run``, due when the next reading is: the card shows the previous reading).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from bot.blocks import PlanDecisionView, plan_message, with_dry_run
from bot.card import outcome_post, unknown_outcome_post
from bot.card_keeper import CardKeeper
from bot.ids import Action
from bot.mrkdwn import drawn
from bot.people import Names, People, as_is
from bot.sink import SlackChatSink
from bot.slack_store import SlackStore
from bot.when import slack_time
from core.cases.approvals import GateStatus
from core.chat import Blocks, deliverable
from core.consumers.notifier import Notifier, Payload, render
from core.domain.messages import StepResultPayload, Topic, TransitionPayload, payload_as
from core.domain.views import CaseView
from core.evidence.baseline import CheckReading, read_before
from core.evidence.configured import source_from_settings
from core.gateway import ToolCall, session_of
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

_DECISIONS = {Topic.PLAN_APPROVED: "gate_approved", Topic.PLAN_REJECTED: "gate_rejected",
              Topic.PLAN_EXPIRED: "gate_expired", Topic.APPROVAL_RECORDED: "plan_approval"}


class SlackNotifier(Notifier):
    """The case card, the plan message and its in-place updates, and the thread's few posts."""

    topics: tuple[str, ...] = (*Notifier.topics, Topic.CHAT_PINNED, Topic.VERIFY_RUN)

    def __init__(self, app: App, store: SlackStore | None = None) -> None:
        super().__init__(app)
        self.cases = app.cases
        self.policy = app.cases.policy
        self.store = store or SlackStore(app.engine)
        self.names: Names = People(self.sink.client) if isinstance(self.sink, SlackChatSink) \
            else as_is
        self.cards = CardKeeper(app, sink=self.sink, names=self.names)
        self.metrics = source_from_settings(app.settings)

    def post_of(self, topic: str, payload: Payload) -> dict[str, Any] | None:
        """What the thread is told, drawn for Slack (``text``, and ``blocks`` for the plan with
        its buttons): the plan, PARKED with why, CLOSED; every other fact is on the card
        only."""
        message = self.message(topic, payload)
        if message is None:
            return None
        text, blocks = message
        return {"text": text} if blocks is None else {"text": text, "blocks": blocks}

    def message(self, topic: str, payload: Payload) -> tuple[str, Blocks | None] | None:
        """The mrkdwn text (and blocks) of ``post_of``; None when the thread is not told."""
        if topic == Topic.PLAN_PROPOSED:
            plan = self._plan_message(payload_as(TransitionPayload, payload))
            said = render(topic, payload)  # the plan is gone: the core's words, drawn
            return plan or (None if said is None else (drawn(said), None))
        if topic == Topic.CASE_TRANSITION:
            text = outcome_post(payload_as(TransitionPayload, payload))
            return None if text is None else (text, None)
        if topic == Topic.EXEC_STEP_RESULT:
            text = unknown_outcome_post(payload_as(StepResultPayload, payload))
            return None if text is None else (text, None)
        return None

    def handle(self, delivery: Delivery) -> None:
        envelope = delivery.envelope
        case_id = UUID(str(envelope.payload.get("case_id", envelope.key)))
        if envelope.topic == Topic.CASE_OPENED:
            self.cards.post(case_id)
            return
        super().handle(delivery)
        if envelope.topic in _DECISIONS:
            # A decision (a move's fact) or a yes that is not enough: both name the plan.
            digest = str(envelope.payload.get("plan_hash"))
            self._update_plan_message(envelope.message_id, case_id, digest)
        self.cards.refresh(case_id)

    def _post(self, args: Mapping[str, Any]) -> dict[str, Any]:
        posted = self.sink.post(str(args["case_id"]), str(args["text"]), args.get("blocks"),
                                thread_key=str(args["thread_key"]))
        approval_id = _approval_id(args.get("blocks"))
        if approval_id is not None and posted.get("ts") and posted.get("channel"):
            self.store.place_approval(approval_id, str(posted["channel"]), str(posted["ts"]))
        return posted

    # -- rendering ------------------------------------------------------------------------

    def _plan_message(self, payload: TransitionPayload) -> tuple[str, Blocks] | None:
        case_id, digest = UUID(str(payload["case_id"])), str(payload.get("plan_hash"))
        found = self.cases.proposed_plan(case_id, digest)
        if found is None:
            return None
        version = int(payload["version"])
        case: CaseView = {**self.cases.get_case(case_id), "version": version}
        approval_id = self.store.save_approval(case_id, digest, version)
        return with_dry_run(plan_message(case, found["plan"], digest, approval_id,
                                         str(found["proposed_by"]), self.policy,
                                         readings=self._readings(case, found["plan"]),
                                         names=self.names),
                            self.cases.plan_dry_run(case_id, digest, version))

    def _readings(self, case: CaseView, plan: Mapping[str, Any]) -> list[CheckReading]:
        """The plan's metric checks read now, before any change (none without a source)."""
        return read_before(plan.get("verify"), self.metrics, str(case.get("tenant") or "")
                           or None)

    def _update_plan_message(self, message_id: int, case_id: UUID, digest: str) -> None:
        ref = self.store.approval_of_plan(case_id, digest)
        found = self.cases.proposed_plan(case_id, digest)
        if ref is None or ref.message_ts is None or found is None:
            return  # the plan was never posted by this bot: nothing to update
        decision = self._decision(case_id, digest, ref.case_version)
        if decision is None:
            return
        deliverable(self.sink)
        case: CaseView = {**self.cases.get_case(case_id), "version": ref.case_version}
        text, blocks = with_dry_run(
            plan_message(case, found["plan"], digest, ref.approval_id,
                         str(found["proposed_by"]), self.policy, decision, names=self.names),
            self.cases.plan_dry_run(case_id, digest, ref.case_version))
        ts = ref.message_ts
        call = ToolCall(tool="chat.update", args={"case_id": str(case_id), "ts": ts,
                                                   "text": text, "blocks": blocks},
                        actor=self.name, session_id=session_of(case_id),
                        business_key=f"update:{message_id}")
        result = self.gateway.run(call, lambda args: self.sink.update(
            str(args["case_id"]), str(args["ts"]), str(args["text"]), args["blocks"]),
            idempotent=True, wait_s=5.0)
        result.raise_for_error(f"chat.update of plan message {ts}")

    def _decision(self, case_id: UUID, digest: str, version: int) -> PlanDecisionView | None:
        """Where the proposal made at case ``version`` stands at the gate, by its approval rows
        (``GateStatus``): who decided, when, why, or the yeses so far; None before any yes."""
        status = self.cases.gate_status(case_id, digest, version=version)
        return None if status is None else decision_view(status)


def decision_view(status: GateStatus) -> PlanDecisionView | None:
    """What the plan message shows of where the gate stands; None while nobody said yes."""
    if status.state == "approved":
        return PlanDecisionView("approved", list(status.approvers), _at(status.decided_at))
    if status.state == "rejected":
        return PlanDecisionView("rejected", [str(status.rejected_by)], _at(status.decided_at),
                                reason=status.reason)
    if status.state == "expired":
        return PlanDecisionView("expired", [], _at(status.decided_at), reason=status.reason)
    if not status.recorded:
        return None
    needs = status.needs if status.needs is not None else status.needed - len(status.recorded)
    return PlanDecisionView("pending", list(status.recorded), _at(status.last_yes_at),
                            needs=max(needs, 1))


def _at(moment: str | None) -> str:
    """A decision's time as the plan message shows it (Slack's date token)."""
    return slack_time(moment)


def _approval_id(blocks: object) -> str | None:
    """The approval id a plan message's buttons carry; None for any other message."""
    if not isinstance(blocks, list):
        return None
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "actions":
            for element in block.get("elements", []):
                if element.get("action_id") == Action.APPROVE:
                    return str(element["value"])
    return None
