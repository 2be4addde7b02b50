"""Events: an ``@opsgate`` mention opens (or continues) the case of its thread and hands the text
to the agent; a message in a case's thread continues that case; the pin reaction on a message of
a case's thread pins it to the case (``bot.pins``). The ack is immediate; the work runs after it,
once per Slack message however often Slack delivers it."""

from __future__ import annotations

import logging

from slack_bolt import App as Bolt

from bot.cases import SlackCases, SlackThread, title_of
from bot.listeners import Body, acknowledge, lazy
from bot.pins import pin, pin_name, reaction_of
from bot.settings import SlackSettings
from core.tracing import bound

log = logging.getLogger(__name__)


EVENTS = ("app_mention", "message", "reaction_added")
"""The Events API types the bot subscribes to (``manifest.yml``: ``message.channels`` and
``message.groups`` are the ``message`` events of public and private channels). Not
``reaction_removed``: removing a pin erases no history."""


PEOPLE_SAYING = (None, "thread_broadcast")
"""Message subtypes that are a person saying something (a reply also sent to the channel is
one); edits, joins, bot posts are not."""


def register(bolt: Bolt, cases: SlackCases) -> None:
    bolt.event("app_mention")(ack=acknowledge,
                              lazy=[lazy(lambda body: on_mention(cases, body), cases)])
    bolt.event("message")(ack=acknowledge,
                          lazy=[lazy(lambda body: on_message(cases, body), cases)])
    bolt.event("reaction_added")(ack=acknowledge,
                                 lazy=[lazy(lambda body: on_reaction(cases, body), cases)])


def thread_of(body: Body) -> SlackThread:
    event = body["event"]
    team = str(body.get("team_id") or event.get("team") or "")
    return SlackThread(team, str(event["channel"]), str(event.get("thread_ts") or event["ts"]))


def on_mention(cases: SlackCases, body: Body) -> None:
    take(cases, body, thread_of(body))


def on_message(cases: SlackCases, body: Body) -> None:
    """A person's reply in a case's thread; anything else (top-level chatter, edits, bots, a
    thread with no case) is not ours."""
    event = body["event"]
    if event.get("subtype") not in PEOPLE_SAYING or event.get("bot_id") or \
            not event.get("thread_ts"):
        return
    where = thread_of(body)
    if cases.store.case_of_thread(where.team, where.channel, where.thread_ts) is None:
        return
    take(cases, body, where)


def on_reaction(cases: SlackCases, body: Body) -> None:
    """The pin reaction on a message: the message is pinned to its case, once; any other
    reaction is not ours."""
    reaction = reaction_of(body)
    ours = pin_name(cases.app.settings.layer(SlackSettings).pin_reaction)
    if reaction is None or reaction.name != ours:
        return
    with bound(reaction.event_id):
        outcome = pin(cases, reaction)
    log.info("pin of %s by %s: %s", reaction.key, reaction.user, outcome)


def addressed(body: Body) -> bool:
    """Whether the message mentions the bot: an ``app_mention``, or a message that names the
    app's own user (Slack's ``authorizations``), whichever delivery came first."""
    event = body["event"]
    if event.get("type") == "app_mention":
        return True
    ours = [str(a.get("user_id")) for a in body.get("authorizations") or []
            if isinstance(a, dict) and a.get("is_bot")]
    return any(f"<@{user}>" in str(event.get("text") or "") for user in ours)


def take(cases: SlackCases, body: Body, where: SlackThread) -> None:
    """Do the message's work once: the first delivery claims it (durably, by ``event_id`` and by
    the message itself, which Slack sends as both ``app_mention`` and ``message``)."""
    event = body["event"]
    event_id = str(body.get("event_id") or f"{where.channel}:{event['ts']}")
    message_key = f"{where.team}:{where.channel}:{event['ts']}"
    owner = cases.store.claim_event(event_id, message_key)
    if owner is None:
        log.info("slack event %s (message %s) already taken; retry %s ignored", event_id,
                 message_key, body.get("retry_num", "?"))
        return
    user, text = str(event.get("user") or "unknown"), str(event.get("text") or "")
    with bound(event_id):  # the event's id follows every gateway call it causes
        case_id, opened = cases.case_for_thread(where, title_of(text), user, event_id)
        cases.converse(case_id, where, text, user=user, opened=opened, event_id=event_id,
                       addressed=addressed(body))
    cases.store.finish_event(event_id, message_key, owner)
