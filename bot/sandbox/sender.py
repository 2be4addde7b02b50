"""What the sandbox sends the bot, exactly as Slack does: signed HTTP requests (v0 HMAC-SHA256
over ``v0:{timestamp}:{body}``) carrying Events API callbacks (``app_mention``, thread
``message``), slash commands (a form, with a ``response_url``) and interactivity payloads
(``block_actions``, ``view_submission``: a form whose ``payload`` field is JSON); a reaction
added to a message is a ``reaction_added`` event (removing one sends nothing: opsgate does not
subscribe to ``reaction_removed``).

With chaos on, every event is delivered again three times (``X-Slack-Retry-Num`` 1-3, some while
the first is still being handled) and every click is sent twice at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx

from bot.sandbox.web_api import respond
from bot.sandbox.workspace import (
    APP_ID,
    BOT,
    CHANNEL_ID,
    CHANNEL_NAME,
    MENTION,
    TEAM_DOMAIN,
    TEAM_ID,
    Message,
    OpenView,
    ResponseTarget,
    SlackError,
    Workspace,
)

log = logging.getLogger(__name__)

RETRY_DELAYS_S = (0.0, 0.3, 1.0)
"""When chaos re-delivers an event after the first attempt: the first retry races the original."""
RETRY_REASON = "http_timeout"
SEND_TIMEOUT_S = 10.0
KEPT_DELIVERIES = 50


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's request signature: ``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(secret: str, body: bytes, content_type: str,
                   now: float | None = None) -> dict[str, str]:
    timestamp = str(int(time.time() if now is None else now))
    return {"Content-Type": content_type, "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature(secret, timestamp, body)}


@dataclass(frozen=True)
class Delivery:
    """One request sent to the bot and how it answered."""

    kind: str
    ref: str  # event id, command text or action id
    attempt: int
    status: int | None
    elapsed_ms: float
    user: str

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "ref": self.ref, "attempt": self.attempt,
                "status": self.status, "ms": round(self.elapsed_ms, 1), "user": self.user}


class SlackSender:
    """Turns what people do on the page into signed requests to the bot's ``/slack/events``."""

    def __init__(self, workspace: Workspace, events_url: str, signing_secret: str,
                 response_base: str, *, chaos: bool = False,
                 client: httpx.Client | None = None) -> None:
        self.workspace = workspace
        self.events_url = events_url
        self.signing_secret = signing_secret
        self.response_base = response_base.rstrip("/")
        self.chaos = chaos
        self.deliveries: deque[Delivery] = deque(maxlen=KEPT_DELIVERIES)
        self._client = client or httpx.Client(timeout=SEND_TIMEOUT_S)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        self.wait()
        self._client.close()

    def wait(self, timeout_s: float = SEND_TIMEOUT_S) -> None:
        """Wait for every request in flight (tests)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
                self._threads = alive
            if not alive or time.monotonic() > deadline:
                return
            alive[0].join(max(0.0, deadline - time.monotonic()))

    # -- what people do ---------------------------------------------------------------------

    def say(self, user: str, text: str, thread_ts: str | None = None) -> Message:
        """``user`` posts ``text`` (``@opsgate`` becomes a mention); the bot gets what its
        subscriptions ask for, as from Slack: a ``message`` event for every message in the
        channel (``message.channels``) and, when it is mentioned, an ``app_mention`` too."""
        self.workspace.person(user)
        text = text.replace("@opsgate", f"<@{BOT.id}>")
        message = self.workspace.post(user, text, thread_ts=thread_ts)
        if BOT.id in MENTION.findall(text):
            self._event(user, self._message_event("app_mention", message))
        self._event(user, {**self._message_event("message", message), "channel_type": "channel"})
        return message

    def react(self, user: str, message_ts: str, name: str, *, on: bool = True) -> None:
        """``user`` adds (or removes) the reaction ``:name:`` on message ``message_ts``; an added
        one reaches the bot as Slack's ``reaction_added`` event."""
        self.workspace.person(user)
        message = self.workspace.message(message_ts)
        if not self.workspace.react(user, message_ts, name, on=on) or not on:
            return
        self._event(user, {"type": "reaction_added", "user": user, "reaction": name,
                           "item_user": message.user,
                           "item": {"type": "message", "channel": CHANNEL_ID, "ts": message.ts},
                           "event_ts": f"{time.time():.6f}"})

    def command(self, user: str, line: str, thread_ts: str | None = None) -> None:
        """``user`` types a slash command, e.g. ``/case status 1a2b``."""
        person = self.workspace.person(user)
        command, _, text = line.strip().partition(" ")
        target = ResponseTarget(user=user, thread_ts=thread_ts)
        form = {"token": "sandbox", "team_id": TEAM_ID, "team_domain": TEAM_DOMAIN,
                "channel_id": CHANNEL_ID, "channel_name": CHANNEL_NAME, "user_id": user,
                "user_name": person.name, "command": command, "text": text.strip(),
                "api_app_id": APP_ID, "is_enterprise_install": "false",
                "response_url": self._response_url(target),
                "trigger_id": self.workspace.issue_trigger(user)}
        body = urlencode(form).encode()
        self._spawn(lambda: self._send("command", line, 1, user, body,
                                       "application/x-www-form-urlencoded", target=target))

    def click(self, user: str, message_ts: str, action_id: str, block_id: str | None = None
              ) -> None:
        """``user`` clicks the button ``action_id`` on message ``message_ts``."""
        person = self.workspace.person(user)
        message = self.workspace.message(message_ts)
        block, element = _find_action(message, action_id, block_id)
        target = ResponseTarget(user=user, thread_ts=message.thread_ts, message_ts=message.ts)
        copies = 2 if self.chaos else 1
        for copy in range(1, copies + 1):
            payload: dict[str, Any] = {
                "type": "block_actions", "user": _user_ref(person), "api_app_id": APP_ID,
                "token": "sandbox", "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
                "enterprise": None, "is_enterprise_install": False,
                "container": {"type": "message", "message_ts": message.ts,
                              "channel_id": CHANNEL_ID,
                              "is_ephemeral": message.visible_to is not None},
                "trigger_id": self.workspace.issue_trigger(user),
                "channel": {"id": CHANNEL_ID, "name": CHANNEL_NAME},
                "message": message.as_slack(), "state": {"values": {}},
                "response_url": self._response_url(target),
                "actions": [{**_action_of(element), "block_id": block.get("block_id", ""),
                             "action_ts": f"{time.time():.6f}"}],
            }
            self._interaction("click", action_id, copy, user, payload)

    def submit(self, user: str, view_id: str, values: dict[str, dict[str, str]]) -> None:
        """``user`` submits the modal ``view_id``; ``values`` is block id → action id → text."""
        person = self.workspace.person(user)
        opened = self.workspace.views.get(view_id)
        if opened is None or opened.user != user:
            raise SlackError("not_found")
        view = {**opened.as_slack(), "state": {"values": _state_values(opened, values)}}
        payload: dict[str, Any] = {
            "type": "view_submission", "user": _user_ref(person), "api_app_id": APP_ID,
            "token": "sandbox", "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "enterprise": None, "is_enterprise_install": False,
            "trigger_id": self.workspace.issue_trigger(user), "view": view, "response_urls": [],
        }
        copies = 2 if self.chaos else 1
        for copy in range(1, copies + 1):
            self._interaction("submit", str(view.get("callback_id", "")), copy, user, payload,
                              view_id=view_id)

    def dismiss(self, user: str, view_id: str) -> None:
        """``user`` closes the modal without submitting (Slack sends no view_closed unless the
        view asks for it with ``notify_on_close``; neither do we)."""
        opened = self.workspace.views.get(view_id)
        if opened is not None and opened.user == user:
            self.workspace.close_view(view_id)

    # -- sending ----------------------------------------------------------------------------

    def _message_event(self, kind: str, message: Message) -> dict[str, Any]:
        event: dict[str, Any] = {"type": kind, "user": message.user, "text": message.text,
                                 "ts": message.ts, "channel": CHANNEL_ID,
                                 "event_ts": message.ts, "team": TEAM_ID}
        if message.thread_ts is not None:
            event["thread_ts"] = message.thread_ts
        return event

    def _event(self, user: str, event: dict[str, Any]) -> None:
        event_id = self.workspace.new_id("Ev")
        envelope = {"token": "sandbox", "team_id": TEAM_ID, "api_app_id": APP_ID,
                    "event": event, "type": "event_callback", "event_id": event_id,
                    "event_time": int(time.time()), "event_context": f"ctx-{event_id}",
                    "authorizations": [{"team_id": TEAM_ID, "user_id": BOT.id,
                                        "is_bot": True, "is_enterprise_install": False}],
                    "is_ext_shared_channel": False}
        body = json.dumps(envelope).encode()
        ref = f"{event['type']} {event_id}"
        self._spawn(lambda: self._send("event", ref, 1, user, body, "application/json"))
        if not self.chaos:
            return
        for retry, delay_s in enumerate(RETRY_DELAYS_S, start=1):
            self._spawn(self._retry(delay_s, retry, ref, user, body))

    def _retry(self, delay_s: float, retry: int, ref: str, user: str, body: bytes
               ) -> Callable[[], None]:
        """Slack's retry ``retry`` of an event: the same body, signed again, after a while."""
        headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": RETRY_REASON}

        def run() -> None:
            time.sleep(delay_s)
            self._send("event", ref, retry + 1, user, body, "application/json",
                       retry_headers=headers)

        return run

    def _interaction(self, kind: str, ref: str, copy: int, user: str, payload: dict[str, Any],
                     view_id: str | None = None) -> None:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        self._spawn(lambda: self._send(kind, ref, copy, user, body,
                                       "application/x-www-form-urlencoded", view_id=view_id))

    def _send(self, kind: str, ref: str, attempt: int, user: str, body: bytes,
              content_type: str, *, retry_headers: dict[str, str] | None = None,
              target: ResponseTarget | None = None, view_id: str | None = None) -> None:
        headers = {**signed_headers(self.signing_secret, body, content_type),
                   **(retry_headers or {})}
        started = time.perf_counter()
        status: int | None = None
        try:
            reply = self._client.post(self.events_url, content=body, headers=headers)
            status = reply.status_code
            self._answered(reply, target, view_id)
        except httpx.HTTPError as exc:
            log.warning("sandbox: %s %s did not reach the bot: %s", kind, ref, exc)
        self.deliveries.append(Delivery(kind, ref, attempt, status,
                                        (time.perf_counter() - started) * 1000, user))
        self.workspace.touch()

    def _answered(self, reply: httpx.Response, target: ResponseTarget | None,
                  view_id: str | None) -> None:
        """What Slack does with the body of the bot's ack."""
        if reply.status_code != 200 or not reply.content.strip():
            if view_id is not None and reply.status_code == 200:
                self.workspace.close_view(view_id)
            return
        try:
            body = reply.json()
        except ValueError:
            body = {"text": reply.text}
        if not isinstance(body, dict):
            return
        if view_id is not None:
            self._view_answer(view_id, body)
        elif target is not None and (body.get("text") or body.get("blocks")):
            token = self.workspace.issue_response_url(target)
            respond(self.workspace, token, body)

    def _view_answer(self, view_id: str, body: dict[str, Any]) -> None:
        action = body.get("response_action")
        if action == "errors":
            self.workspace.replace_view(view_id, None, body.get("errors") or {})
        elif action in ("update", "push") and isinstance(body.get("view"), dict):
            self.workspace.replace_view(view_id, body["view"])
        else:
            self.workspace.close_view(view_id)

    def _response_url(self, target: ResponseTarget) -> str:
        return f"{self.response_base}/{self.workspace.issue_response_url(target)}"

    def _spawn(self, work: Callable[[], None]) -> None:
        thread = threading.Thread(target=work, name="sandbox-send", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()


def _user_ref(person: Any) -> dict[str, str]:
    return {"id": person.id, "username": person.name, "name": person.name, "team_id": TEAM_ID}


def _find_action(message: Message, action_id: str, block_id: str | None
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    for block in message.blocks or []:
        if block_id is not None and block.get("block_id") != block_id:
            continue
        elements = list(block.get("elements") or [])
        if isinstance(block.get("accessory"), dict):
            elements.append(block["accessory"])
        for element in elements:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return block, element
    raise SlackError("action_not_found")


def _action_of(element: dict[str, Any]) -> dict[str, Any]:
    action = {"type": element.get("type", "button"), "action_id": element["action_id"],
              "text": element.get("text", {"type": "plain_text", "text": ""})}
    for name in ("value", "style", "url"):
        if name in element:
            action[name] = element[name]
    return action


def _state_values(opened: OpenView, values: dict[str, dict[str, str]]
                  ) -> dict[str, dict[str, Any]]:
    """The modal's ``state.values``: one entry per input block, typed like its element."""
    state: dict[str, dict[str, Any]] = {}
    for block in opened.view.get("blocks", []):
        element = block.get("element")
        if block.get("type") != "input" or not isinstance(element, dict):
            continue
        block_id, action_id = block.get("block_id", ""), element.get("action_id", "")
        value = values.get(block_id, {}).get(action_id)
        state[block_id] = {action_id: {"type": element.get("type", "plain_text_input"),
                                       "value": value or None}}
    return state
