"""The sandbox's Slack workspace, in memory: one incident channel with its threads and the
messages' reactions, the people who can be switched between on the page, the bot's user,
ephemeral messages, open modals, trigger ids and response URLs. Thread-safe; every change bumps
``version`` so the page knows to redraw."""

from __future__ import annotations

import itertools
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import OpsgateError

Blocks = list[dict[str, Any]]

TEAM_ID = "T0SANDBOX"
TEAM_DOMAIN = "opsgate-sandbox"
APP_ID = "A0OPSGATE"
MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")


@dataclass(frozen=True)
class Person:
    """Someone in the workspace; ``role`` is what the page says about them."""

    id: str
    name: str
    real_name: str
    role: str
    is_bot: bool = False

    def as_slack_user(self) -> dict[str, Any]:
        """The ``user`` object of ``users.info``."""
        return {"id": self.id, "team_id": TEAM_ID, "name": self.name, "real_name": self.real_name,
                "is_bot": self.is_bot, "deleted": False, "tz": "UTC",
                "profile": {"display_name": self.name, "real_name": self.real_name}}


BOT = Person("U0OPSGATE", "opsgate", "opsgate", "the bot", is_bot=True)
BOT_ID = "B0OPSGATE"
REQUESTER = Person("U0RILEY", "riley", "Riley Requester", "requester (opens cases)")
APPROVER = Person("U0ALICE", "alice", "Alice Approver", "approver (on the approver list)")
OUTSIDER = Person("U0BOB", "bob", "Bob Bystander", "not on the approver list")
PEOPLE = (REQUESTER, APPROVER, OUTSIDER)
CHANNEL_ID = "C0INCIDENT"
CHANNEL_NAME = "incident"


def with_ids(blocks: Blocks | None) -> Blocks | None:
    """``blocks`` with a ``block_id`` on every block and an ``action_id`` on every interactive
    element, made up the way Slack does when the app leaves them out."""
    if blocks is None:
        return None
    filled: Blocks = []
    for index, block in enumerate(blocks):
        block = {**block, "block_id": block.get("block_id") or f"b{index}"}
        for key in ("element", "accessory"):
            if isinstance(block.get(key), dict):
                block[key] = _with_action_id(block[key], f"{block['block_id']}-{key}")
        if isinstance(block.get("elements"), list):
            block["elements"] = [
                _with_action_id(e, f"{block['block_id']}-{i}") if isinstance(e, dict) else e
                for i, e in enumerate(block["elements"])]
        filled.append(block)
    return filled


def _with_action_id(element: dict[str, Any], default: str) -> dict[str, Any]:
    if element.get("type") in INTERACTIVE and not element.get("action_id"):
        return {**element, "action_id": default}
    return element


INTERACTIVE = frozenset({"button", "plain_text_input", "static_select", "users_select",
                         "datepicker", "checkboxes", "radio_buttons", "overflow"})


class SlackError(OpsgateError):
    """A Web API call Slack would answer with ``{"ok": false, "error": code}``."""

    code = "slack_error"

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Message:
    """A message in the channel; ``visible_to`` set means ephemeral (only that person sees it)."""

    ts: str
    user: str
    text: str
    blocks: Blocks | None = None
    thread_ts: str | None = None
    visible_to: str | None = None
    bot_id: str | None = None
    edited: bool = False
    reactions: dict[str, list[str]] = field(default_factory=dict)  # emoji name → who, in order

    def as_slack(self) -> dict[str, Any]:
        """The message as Slack shows it to apps (in payloads and ``conversations.replies``)."""
        message: dict[str, Any] = {"type": "message", "ts": self.ts, "user": self.user,
                                   "text": self.text, "team": TEAM_ID}
        if self.blocks is not None:
            message["blocks"] = self.blocks
        if self.thread_ts is not None:
            message["thread_ts"] = self.thread_ts
        if self.bot_id is not None:
            message["bot_id"] = self.bot_id
        if self.edited:
            message["edited"] = {"user": self.user, "ts": self.ts}
        if self.reactions:
            message["reactions"] = [{"name": name, "users": list(users), "count": len(users)}
                                    for name, users in self.reactions.items()]
        return message


@dataclass
class OpenView:
    """A modal open in front of one person."""

    id: str
    user: str
    view: dict[str, Any]
    errors: dict[str, str] = field(default_factory=dict)

    def as_slack(self) -> dict[str, Any]:
        return {**self.view, "id": self.id, "team_id": TEAM_ID, "app_id": APP_ID,
                "hash": f"{self.id}.hash", "state": {"values": {}}}


@dataclass(frozen=True)
class ResponseTarget:
    """Where a ``response_url`` posts: the person who acted, and the message clicked, if any."""

    user: str
    thread_ts: str | None = None
    message_ts: str | None = None


class Workspace:
    """The workspace state the Web API changes and the page reads."""

    def __init__(self, bot_token: str) -> None:
        self.bot_token = bot_token
        self.people = {person.id: person for person in (*PEOPLE, BOT)}
        self.messages: list[Message] = []
        self.views: dict[str, OpenView] = {}
        self.triggers: dict[str, str] = {}  # trigger id -> the person whose action issued it
        self.responses: dict[str, ResponseTarget] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []  # every Web API call, in order
        self.streams: dict[str, Any] = {}  # streamed messages by ts (``bot.sandbox.streams``)
        self.version = 0
        self._lock = threading.RLock()
        self._clock = itertools.count(1)
        self._ids = itertools.count(1)
        self._listeners: list[Callable[[], None]] = []

    # -- bookkeeping ------------------------------------------------------------------------

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        self.version += 1
        for listener in self._listeners:
            listener()

    def new_ts(self) -> str:
        """A message timestamp: unique and increasing, like Slack's."""
        return f"{int(time.time())}.{next(self._clock):06d}"

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}{secrets.token_hex(3).upper()}"

    def person(self, user_id: str) -> Person:
        try:
            return self.people[user_id]
        except KeyError:
            raise SlackError("user_not_found") from None

    def channel(self, channel: str) -> str:
        """The channel id for an id or a name (``incident``, ``#incident``)."""
        if channel in (CHANNEL_ID, CHANNEL_NAME, f"#{CHANNEL_NAME}"):
            return CHANNEL_ID
        raise SlackError("channel_not_found")

    def message(self, ts: str) -> Message:
        with self._lock:
            for message in self.messages:
                if message.ts == ts:
                    return message
        raise SlackError("message_not_found")

    # -- what people and the bot do ---------------------------------------------------------

    def post(self, user: str, text: str, blocks: Blocks | None = None, *,
             thread_ts: str | None = None, visible_to: str | None = None) -> Message:
        with self._lock:
            if thread_ts is not None:
                parent = self.message(thread_ts)
                thread_ts = parent.thread_ts or parent.ts  # a reply to a reply joins the thread
            bot_id = BOT_ID if user == BOT.id else None
            message = Message(self.new_ts(), user, text, with_ids(blocks), thread_ts,
                              visible_to, bot_id)
            self.messages.append(message)
            self._changed()
            return message

    def update(self, ts: str, text: str | None, blocks: Blocks | None) -> Message:
        with self._lock:
            message = self.message(ts)
            if text is not None:
                message.text = text
            if blocks is not None:
                message.blocks = with_ids(blocks)
            message.edited = True
            self._changed()
            return message

    def delete(self, ts: str) -> None:
        with self._lock:
            self.messages.remove(self.message(ts))
            self._changed()

    def react(self, user: str, ts: str, name: str, *, on: bool = True) -> bool:
        """``user`` adds (or, ``on`` False, removes) the reaction ``name`` on message ``ts``;
        whether that changed anything (Slack tells apps only of changes)."""
        with self._lock:
            message = self.message(ts)
            users = message.reactions.setdefault(name, [])
            changed = (user not in users) if on else (user in users)
            if changed and on:
                users.append(user)
            elif changed:
                users.remove(user)
            if not users:
                del message.reactions[name]
            if changed:
                self._changed()
            return changed

    def thread(self, ts: str) -> list[Message]:
        with self._lock:
            return [m for m in self.messages
                    if m.visible_to is None and (m.ts == ts or m.thread_ts == ts)]

    def issue_trigger(self, user: str) -> str:
        with self._lock:
            trigger_id = f"{next(self._ids)}.{secrets.token_hex(6)}"
            self.triggers[trigger_id] = user
            return trigger_id

    def issue_response_url(self, target: ResponseTarget) -> str:
        with self._lock:
            token = secrets.token_urlsafe(12)
            self.responses[token] = target
            return token

    def open_view(self, trigger_id: str, view: dict[str, Any]) -> OpenView:
        with self._lock:
            user = self.triggers.pop(trigger_id, None)
            if user is None:
                raise SlackError("invalid_trigger_id")
            view = {**view, "blocks": with_ids(view.get("blocks") or [])}
            opened = OpenView(self.new_id("V"), user, view)
            self.views[opened.id] = opened
            self._changed()
            return opened

    def close_view(self, view_id: str) -> None:
        with self._lock:
            self.views.pop(view_id, None)
            self._changed()

    def replace_view(self, view_id: str, view: dict[str, Any] | None,
                     errors: dict[str, str] | None = None) -> OpenView:
        with self._lock:
            opened = self.views.get(view_id)
            if opened is None:
                raise SlackError("not_found")
            if view is not None:
                opened.view = {**view, "blocks": with_ids(view.get("blocks") or [])}
            opened.errors = dict(errors or {})
            self._changed()
            return opened

    def record_call(self, method: str, args: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append((method, args))

    def touch(self) -> None:
        """Something the page shows changed outside the messages (deliveries, chaos)."""
        with self._lock:
            self._changed()

    # -- what the page reads ----------------------------------------------------------------

    def visible(self, user: str) -> list[Message]:
        with self._lock:
            return [m for m in self.messages if m.visible_to in (None, user)]

    def views_of(self, user: str) -> list[OpenView]:
        with self._lock:
            return [v for v in self.views.values() if v.user == user]
