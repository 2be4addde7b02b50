"""Pins: a person reacts to a message of a case's thread with the pin reaction
(``OPSGATE_PIN_REACTION``, ``pushpin`` by default) and the message — author, text, permalink —
becomes one note on the case's timeline (``message_pinned``), which the card, ``/case catchup``
and ``opsgate export`` show. The note keeps the message's words, not Slack's markup: a mention
or a link in it is shown again as words, never as a ping or a link.

Once per message, however often and in whatever order Slack delivers reactions: the note's
idempotency key is the message itself (team, channel, ts), not the event, so a retried event,
a second person's pin and a pin added again after being removed all find the note written. A
removed reaction erases nothing (the bot does not subscribe to ``reaction_removed``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from slack_sdk.errors import SlackApiError

from bot.cases import SlackCases
from bot.mrkdwn import from_slack
from core.chat import PINNED_EVENT
from core.domain.commands import NoteCase
from core.domain.messages import ChatPinnedFacts, Topic
from core.errors import KeyReuse

log = logging.getLogger(__name__)

TEXT_LIMIT = 1000  # of a pinned message's text on the timeline


@dataclass(frozen=True)
class Reaction:
    """One ``reaction_added`` event on a message."""

    team: str
    channel: str
    ts: str  # the message's
    user: str  # who reacted
    name: str  # the emoji, without colons
    event_id: str

    @property
    def key(self) -> str:
        """The pin's idempotency key: the message, whoever pins it and however often."""
        return f"slack:pin:{self.team}:{self.channel}:{self.ts}"


def reaction_of(body: Mapping[str, Any]) -> Reaction | None:
    """The reaction a ``reaction_added`` event is about; None unless it is on a message."""
    event = body.get("event") or {}
    item = event.get("item") or {}
    if item.get("type") != "message" or not item.get("channel") or not item.get("ts"):
        return None
    return Reaction(str(body.get("team_id") or ""), str(item["channel"]), str(item["ts"]),
                    str(event.get("user") or "unknown"), str(event.get("reaction") or ""),
                    str(body.get("event_id") or f"{item['channel']}:{item['ts']}"))


def pin_name(setting: str) -> str:
    """A reaction's name as events carry it: ``:pushpin:`` → ``pushpin``."""
    return setting.strip().strip(":")


def pin(cases: SlackCases, reaction: Reaction) -> str:
    """Note the reacted-to message on its case's timeline once; what happened, in a word:
    ``pinned``, ``already`` (pinned before), ``not-a-case`` (no case thread) or ``gone``
    (Slack no longer has the message)."""
    message = message_of(cases, reaction.channel, reaction.ts)
    if message is None:
        return "gone"
    thread_ts = str(message.get("thread_ts") or message["ts"])
    case_id = cases.store.case_of_thread(reaction.team, reaction.channel, thread_ts)
    if case_id is None:
        return "not-a-case"
    note = NoteCase(case_id, PINNED_EVENT, reaction.user,
                    reason=from_slack(message.get("text"))[:TEXT_LIMIT] or "(no text)",
                    meta=ChatPinnedFacts(
                        author=str(message.get("user") or message.get("bot_id") or "?"),
                        channel=reaction.channel, ts=reaction.ts, thread_ts=thread_ts,
                        permalink=permalink_of(cases, reaction.channel, reaction.ts,
                                               thread_ts)),
                    topic=Topic.CHAT_PINNED, correlation_id=reaction.event_id)
    return _noted(cases, case_id, note, reaction.key)


def _noted(cases: SlackCases, case_id: UUID, note: NoteCase, key: str) -> str:
    reply = cases.cases.note(note, key)
    try:
        reply.data()  # any refusal but the one below raises: the one error handler reports it
    except KeyReuse:
        return "already"  # pinned before by someone else, or with the text as it was then
    if reply.replayed:
        return "already"
    log.info("message %s pinned to case %s by %s", key, case_id, note.actor)
    return "pinned"


def message_of(cases: SlackCases, channel: str, ts: str) -> Mapping[str, Any] | None:
    """The message ``ts`` (a thread's root or one of its replies), as Slack has it now."""
    try:
        answer = cases.client.conversations_replies(channel=channel, ts=ts, latest=ts,
                                                    oldest=ts, inclusive=True, limit=1)
    except SlackApiError as failed:
        log.info("cannot read message %s in %s: %s", ts, channel, failed.response.get("error"))
        return None
    messages = answer.get("messages") or []
    return next((m for m in messages if str(m.get("ts")) == ts), None)


def permalink_of(cases: SlackCases, channel: str, ts: str, thread_ts: str) -> str:
    """Slack's permalink of the message (``chat.getPermalink``), else one built the way Slack
    builds them from the workspace's URL."""
    try:
        return str(cases.client.chat_getPermalink(channel=channel, message_ts=ts)["permalink"])
    except (SlackApiError, KeyError) as failed:
        log.info("chat.getPermalink of %s in %s failed (%s): building it", ts, channel, failed)
    link = f"{cases.workspace_url()}archives/{channel}/p{ts.replace('.', '')}"
    return link if thread_ts == ts else f"{link}?thread_ts={thread_ts}&cid={channel}"
