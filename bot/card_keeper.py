"""Keeping each case's card current: posted once when the case opens (in the case's thread, or as
the first message of a new thread in ``OPSGATE_INCIDENT_CHANNEL`` for a case opened elsewhere),
then rendered again from the case's state and replaced in place (``chat.update``) whenever
something happens to the case.

Order-safe: a render is of the case's state when it is made (its timeline, its latest plan),
never of the event that caused it, and one renderer at a time updates a card (a short lease in
``slack_card``); a renderer that finds the card held asks the holder to render once more, so the
last render always follows the last change and a late event never brings back an older state.
Every post and update is a gateway call: the post once per case, each update once per update
number and content (a redelivered event replays, a changed content is a new call).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from bot.card import card_message
from bot.card_state import CaseState
from bot.card_store import Card, CardStore
from bot.mrkdwn import escape
from bot.people import Names, as_is, mentions_in
from core.cases.progress import CaseProgress
from core.changes.store import ChangeStore
from core.chat import ChatSink, deliverable
from core.errors import InternalError
from core.gateway import ToolCall, ToolCallFailed, session_of
from core.investigate.words import change_line

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

ACTOR = "notifier"
LEASE_S = 15.0  # one render and its chat.update (the Web API client times out at 10 s)
POLL_S = 0.05  # how often a renderer that asked the holder for one more render looks again
WAIT_S = 5.0  # a duplicate gateway call waits this long for the first one's result


class CardKeeper:
    """Posts, renders and updates the case cards of one opsgate app."""

    def __init__(self, app: App, store: CardStore | None = None,
                 sink: ChatSink | None = None, names: Names = as_is) -> None:
        self.names = names
        self.cases = app.cases
        self.policy = app.cases.policy
        self.gateway = app.gateway
        self.sink = sink or app.chat
        self.store = store or CardStore(app.engine)
        self.changes = ChangeStore(app.engine)

    def post(self, case_id: UUID) -> None:
        """Post the case's card, once per case however often this is asked, then bring it up
        to date."""
        card = self.store.card(case_id)
        if card is None or card.message_ts is None:
            deliverable(self.sink)  # no chat: the card waits, nothing claimed
            call = ToolCall(tool="chat.post", args={"case_id": str(case_id), "card": "case card"},
                            actor=ACTOR, session_id=session_of(case_id),
                            business_key=f"card:{case_id}")
            # Not idempotent: a post that may have happened without its result stored is left
            # for reconciliation rather than posted twice.
            result = self.gateway.run(call, lambda _args: self._post_card(case_id),
                                      wait_s=WAIT_S)
            posted = result.result if isinstance(result.result, Mapping) else {}
            result.raise_for_error(f"the card of case {case_id}")
            if not posted.get("ts"):  # nowhere to post (no thread, no incident channel)
                log.warning("case %s has no card: %s", case_id, posted.get("error"))
                return
            self.store.place(case_id, _text(posted.get("channel")), str(posted["ts"]),
                             str(posted.get("shown") or ""))
        self.refresh(case_id)

    def refresh(self, case_id: UUID) -> None:
        """Show the case's current state on its card (nothing while it has no card)."""
        owner = uuid.uuid4().hex
        if not self._hold(case_id, owner):
            return
        try:
            self._render(case_id, owner)
        except BaseException:
            self.store.abandon(case_id, owner)
            raise

    def _hold(self, case_id: UUID, owner: str) -> bool:
        """Whether ``owner`` now holds the card; False when there is no card yet (posting it
        renders the state of then) or the holder rendered once more for us."""
        while True:
            taken = self.store.take(case_id, owner, LEASE_S)
            if taken is None:
                return False
            if taken:
                return True
            if self._rendered_by_holder(case_id):
                return False

    def _render(self, case_id: UUID, owner: str) -> None:
        """Render and update until nobody asked for one more render meanwhile."""
        while True:
            card = self.store.card(case_id)
            if card is None or card.message_ts is None:
                raise InternalError(f"the card of case {case_id} vanished while held")
            text, blocks = card_message(self.state(case_id, card))
            shown = digest_of(text, blocks)
            if shown != card.shown:
                self._update(case_id, card.message_ts, card.updates, text, blocks, shown)
                self.store.showed(case_id, owner, shown)
            if self.store.release(case_id, owner):
                return

    def working(self, case_id: UUID, line: str | None) -> None:
        """Say on the card that the agent works on the case (``line``), or, with None, that it
        stopped. A card that fails to update does not stop the conversation."""
        try:
            self.store.set_working(case_id, line)
            self.refresh(case_id)
        except Exception:  # the reply matters more than the card's context line
            log.exception("could not show the working line on the card of case %s", case_id)

    def state(self, case_id: UUID, card: Card | None = None) -> CaseState:
        """The case as the card shows it: its progress and the policy's numbers."""
        progress = self.cases.progress(case_id)
        needs = 1 if progress.gate is None else progress.gate.needed
        approvers = mentions_in(escape(self.policy.describe_approvers()), self.names)
        return CaseState(progress, needs, approvers,
                         None if card is None else card.working, self._touches(progress),
                         self._last_change(progress), names=self.names)

    def _last_change(self, progress: CaseProgress) -> str | None:
        """The last deploy or configuration change of the case's components before it opened
        ("14:02 payments-api v2.4.0 by ci"); None when there is none or none is named."""
        names = progress.case.get("components") or []
        if not names:
            return None
        catalog = self.policy.catalog()
        workloads = [c.workload for n in names if (c := catalog.component(n)) is not None]
        opened = datetime.fromisoformat(progress.case["created_at"])
        change = self.changes.last_before(names, workloads, opened)
        return None if change is None else change_line(change)

    def _touches(self, progress: CaseProgress) -> str | None:
        """What the case's latest plan touches (else the case's own components), with owners
        and lifecycles as the catalog has them."""
        policy = self.policy.at(progress.case.get("components", ()), None)
        plan = progress.plan
        if plan is not None:
            touched = policy.subject(plan.plan, plan.proposed_by or "").components
        else:
            touched, _unknown = policy.catalog().resolve(policy.components)
        named = [f"{c.name} (owner {c.owner}, {c.lifecycle})" for c in touched]
        return ", ".join(named) or None

    def _rendered_by_holder(self, case_id: UUID) -> bool:
        """Wait for the holder asked for one more render: True once it let go having rendered,
        False when its lease ran out or it failed (then this renderer takes the card)."""
        while True:
            card = self.store.card(case_id)
            if card is None or card.owner is None:
                return card is None or not card.dirty
            if card.busy_until is not None and card.busy_until < datetime.now(UTC):
                return False
            time.sleep(POLL_S)

    def _post_card(self, case_id: UUID) -> dict[str, Any]:
        text, blocks = card_message(self.state(case_id, self.store.card(case_id)))
        posted = self.sink.post(str(case_id), text, blocks, thread_key=str(case_id))
        return {**posted, "shown": digest_of(text, blocks)}

    def _update(self, case_id: UUID, ts: str, number: int, text: str, blocks: list[Any],
                shown: str) -> None:
        deliverable(self.sink)
        call = ToolCall(tool="chat.update", args={"case_id": str(case_id), "ts": ts,
                                                  "text": text, "blocks": blocks},
                        actor=ACTOR, session_id=session_of(case_id),
                        business_key=f"card:{case_id}:{number + 1}:{shown}")
        result = self.gateway.run(call, lambda args: self.sink.update(
            str(args["case_id"]), str(args["ts"]), str(args["text"]), args["blocks"]),
            idempotent=True, wait_s=WAIT_S)
        answer = result.result if isinstance(result.result, Mapping) else {}
        doing = f"chat.update of the card of case {case_id}"
        result.raise_for_error(doing)
        if answer.get("ok") is False:
            raise ToolCallFailed(f"{doing}: {result.status} {answer.get('error')}",
                                 key=result.key, status=str(result.status),
                                 error=answer.get("error"))


def digest_of(text: str, blocks: list[Any]) -> str:
    """A short digest of a rendered card: equal renders need no update."""
    return hashlib.sha256(json.dumps([text, blocks], sort_keys=True).encode()).hexdigest()[:16]


def _text(value: object) -> str | None:
    return None if value is None else str(value)
