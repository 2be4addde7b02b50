"""Where case updates are posted for people to read: the ``ChatSink`` protocol the notifier posts
through, ``RecordingSink``, which keeps posts in memory (tests), and ``HeldChat``, which sends
nothing and says so (``ChatNotConfigured``), so a post without Slack is held, never recorded as
sent.

What the core says is ``Said``: plain words and the links opsgate itself adds (an alert's graph),
never a chat format; a sink's ``say`` draws it in its own (Slack: mrkdwn, escaped, in the bot).
``post`` and ``update`` carry a front end's own drawing (the bot's text and Block Kit).
The Slack front end plugs in its own sink (``chat.postMessage`` / ``chat.update``); the core
never imports it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.messaging.consumer import Held

Blocks = list[dict[str, Any]]


@dataclass(frozen=True)
class Link:
    """A link opsgate itself adds to what it says (an alert's graph): where to, and its label."""

    url: str
    label: str


Said = tuple["str | Link", ...]
"""What the core says in a chat, in order: plain words and opsgate's own links."""


def graph_of(url: object, label: str = "graph") -> Said:
    """A space and opsgate's link to ``url``, when it is an http(s) address; else nothing."""
    target = "" if url is None else str(url).strip()
    return (" ", Link(target, label)) if target.startswith(("http://", "https://")) else ()


def plain(said: Said) -> str:
    """``said`` as plain text: a link reads as its label and address."""
    return "".join(part if isinstance(part, str) else f"{part.label} ({part.url})"
                   for part in said)


def said_to_json(said: Said) -> list[Any]:
    """``said`` as JSON (a gateway call's arguments): words as strings, links as objects."""
    return [part if isinstance(part, str) else {"url": part.url, "label": part.label}
            for part in said]


def said_from_json(parts: list[Any]) -> Said:
    return tuple(part if isinstance(part, str) else Link(str(part["url"]), str(part["label"]))
                 for part in parts)

PINNED_EVENT = "message_pinned"
"""The timeline note of a chat message someone pinned to the case (author, text, permalink in
its meta); ``opsgate export`` lists them in the postmortem's timeline."""


class ChatSink(Protocol):
    def say(self, case_id: str, said: Said, thread_key: str | None = None) -> dict[str, Any]:
        """Post what the core says in the case's thread, drawn in the chat's own format (words
        from outside shown as words, never as a mention or link); returns ``post``'s answer."""
        ...

    def post(self, case_id: str, text: str, blocks: Blocks | None = None,
             thread_key: str | None = None) -> dict[str, Any]:
        """Post ``text`` (and Block Kit ``blocks``) in the case's thread; returns at least
        ``{"ts": …}``, the posted message's id, which ``update`` takes."""
        ...

    def update(self, case_id: str, ts: str, text: str,
               blocks: Blocks | None = None) -> dict[str, Any]:
        """Replace the message ``ts`` in place (an approval message once decided)."""
        ...


@dataclass(frozen=True)
class ChatMessage:
    case_id: str
    ts: str
    text: str
    blocks: Blocks | None = None
    thread_key: str | None = None


@dataclass
class RecordingSink:
    """Keeps every post and update in memory, in order."""

    posts: list[ChatMessage] = field(default_factory=list)
    updates: list[ChatMessage] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def say(self, case_id: str, said: Said, thread_key: str | None = None) -> dict[str, Any]:
        """Kept as plain text (``plain``)."""
        return self.post(case_id, plain(said), thread_key=thread_key)

    def post(self, case_id: str, text: str, blocks: Blocks | None = None,
             thread_key: str | None = None) -> dict[str, Any]:
        with self._lock:
            ts = f"{len(self.posts) + 1}.000000"
            self.posts.append(ChatMessage(case_id, ts, text, blocks, thread_key))
        return {"ok": True, "ts": ts, "thread_key": thread_key}

    def update(self, case_id: str, ts: str, text: str,
               blocks: Blocks | None = None) -> dict[str, Any]:
        with self._lock:
            self.updates.append(ChatMessage(case_id, ts, text, blocks))
        return {"ok": True, "ts": ts}

    def thread(self, case_id: str) -> list[str]:
        """The texts posted for one case, in order."""
        with self._lock:
            return [message.text for message in self.posts if message.case_id == case_id]


class ChatNotConfigured(Held):
    """There is no chat to post in (Slack is not configured): the post is held until a process
    with Slack takes it back, and the gateway records nothing as sent."""

    code = "chat_not_configured"


@dataclass(frozen=True)
class HeldChat:
    """The sink of a process without Slack: every post and update is refused with ``why``, so
    the notifier's messages are held until a process with Slack delivers them."""

    why: str

    def say(self, case_id: str, said: Said, thread_key: str | None = None) -> dict[str, Any]:
        raise ChatNotConfigured(self.why)

    def post(self, case_id: str, text: str, blocks: Blocks | None = None,
             thread_key: str | None = None) -> dict[str, Any]:
        raise ChatNotConfigured(self.why)

    def update(self, case_id: str, ts: str, text: str,
               blocks: Blocks | None = None) -> dict[str, Any]:
        raise ChatNotConfigured(self.why)


def deliverable(sink: ChatSink) -> None:
    """Raise ``ChatNotConfigured`` when ``sink`` holds every post: called before the gateway
    call of a post or update, so a held post leaves no ledger row (its later delivery renders it
    anew, under the same key)."""
    if isinstance(sink, HeldChat):
        raise ChatNotConfigured(sink.why)


def can_post(sink: ChatSink) -> bool:
    """Whether ``sink`` posts (anything but ``HeldChat``)."""
    return not isinstance(sink, HeldChat)
