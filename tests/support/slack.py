"""What the Slack bot's tests share: a local recording server playing Slack's Web API, requests
signed exactly as Slack signs them, and the running bot (uvicorn on 127.0.0.1, the in-process
loop, the Slack notifier) over a migrated database."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode
from uuid import UUID

import httpx
import uvicorn
from pydantic import SecretStr
from sqlalchemy import Engine

from bot.agent import Agent
from bot.app import SlackEvents, build_bolt, mount_slack_events
from bot.cli import slack_chat, thread_investigation
from bot.groups import group_members
from bot.notifier import SlackNotifier
from bot.settings import SlackSettings
from core.api import create_api
from core.bootstrap import App, Extensions, bootstrap
from core.loop import InProcessLoop
from core.settings import Settings
from tests.support.local_http import LocalServer, Reply, Seen, local_server
from tests.support.metrics import with_stand_in
from tests.support.scripts import runbook_on_path
from tests.support.slack_streams import Stream, chunk_problems, plan_problems, task_problems

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM, CHANNEL, BOT_USER = "T0001", "C0INCIDENT", "U0BOT"
REQUESTER, APPROVER, SECOND, OUTSIDER = "U0ALICE", "U0BOB", "U0CAROL", "U0MALLORY"
APPROVERS = [APPROVER, SECOND]
GROUPS = {"S0ONCALL": [APPROVER]}  # the user groups the fake Slack knows
HANDLES = {"S0ONCALL": "oncall"}  # their handles (usergroups.list)
NAMES = {REQUESTER: "alice", APPROVER: "bob", SECOND: "carol", OUTSIDER: "mallory",
         BOT_USER: "opsgate"}  # display names (users.info); any other id is user_not_found


# -- Slack's Web API, played locally ----------------------------------------------------------


MAX_BLOCKS = 50  # a message's blocks (docs.slack.dev/reference/block-kit/blocks)
LIMITS = {("section", "text"): 3000, ("header", "text"): 150, ("context", "elements"): 10,
          ("actions", "elements"): 25, ("section", "fields"): 10}
FIELD_TEXT = 2000  # each of a section's fields
BLOCK_ID, ACTION_ID, BUTTON_TEXT, BUTTON_VALUE, URL = 255, 255, 75, 2000, 3000


def block_kit_problems(blocks: object) -> list[str]:
    """What Slack would refuse in a message's ``blocks`` (its documented Block Kit limits), each
    problem as Slack words it, with a JSON pointer; empty when Slack takes them."""
    if blocks is None:
        return []
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    problems = [f"must provide at most {MAX_BLOCKS} items [json-pointer:/blocks]"] \
        if len(blocks) > MAX_BLOCKS else []
    kinds = {block.get("type") for block in blocks if isinstance(block, dict)}
    if {"plan", "task_card"} <= kinds:
        problems.append("a plan and task cards cannot share a message [json-pointer:/blocks]")
    for n, block in enumerate(blocks):
        problems += [f"{problem} [json-pointer:/blocks/{n}{where}]"
                     for problem, where in _block_problems(block)]
    return problems


def _block_problems(block: Any) -> list[tuple[str, str]]:
    kind = block.get("type")
    found: list[tuple[str, str]] = []
    if kind == "plan":
        found += plan_problems(block)
    elif kind == "task_card":
        found += task_problems(block)
    if len(str(block.get("block_id", ""))) > BLOCK_ID:
        found.append((f"must be less than {BLOCK_ID + 1} characters", "/block_id"))
    text = (block.get("text") or {}).get("text") if isinstance(block.get("text"), dict) else None
    limit = LIMITS.get((kind, "text"))
    if text is not None and limit is not None and not 0 < len(text) <= limit:
        found.append((f"must be between 1 and {limit} characters", "/text/text"))
    if kind == "header" and (block.get("text") or {}).get("type") != "plain_text":
        found.append(("must be a plain_text object", "/text"))
    for name in ("elements", "fields"):
        items = block.get(name) or []
        limit = LIMITS.get((kind, name))
        if limit is not None and len(items) > limit:
            found.append((f"must provide at most {limit} items", f"/{name}"))
    for n, item in enumerate(block.get("fields") or []):
        if len(str(item.get("text", ""))) > FIELD_TEXT:
            found.append((f"must be less than {FIELD_TEXT + 1} characters", f"/fields/{n}/text"))
    elements = [(f"/elements/{n}", e) for n, e in enumerate(block.get("elements") or [])]
    if isinstance(block.get("accessory"), dict):
        elements.append(("/accessory", block["accessory"]))
    for where, element in elements:
        found += [(problem, f"{where}{at}") for problem, at in _element_problems(element)]
    return found


def _element_problems(element: Any) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if element.get("type") in ("mrkdwn", "plain_text") and not 0 < len(
            str(element.get("text", ""))) <= 3000:
        found.append(("must be between 1 and 3000 characters", "/text"))
    if element.get("type") != "button":
        return found
    for name, limit, at in (("action_id", ACTION_ID, "/action_id"),
                            ("value", BUTTON_VALUE, "/value"), ("url", URL, "/url")):
        if len(str(element.get(name, ""))) > limit:
            found.append((f"must be less than {limit + 1} characters", at))
    if len(str((element.get("text") or {}).get("text", ""))) > BUTTON_TEXT:
        found.append((f"must be less than {BUTTON_TEXT + 1} characters", "/text/text"))
    if "confirm" in element:
        found += [(problem, f"/confirm{at}") for problem, at in _confirm_problems(
            element["confirm"])]
    return found


CONFIRM_LIMITS = {"title": 100, "text": 300, "confirm": 30, "deny": 30}  # a confirmation dialog


def _confirm_problems(confirm: Any) -> list[tuple[str, str]]:
    """A confirmation dialog object's refusals: its four plain_text texts within their limits,
    ``style`` primary or danger (docs.slack.dev/reference/block-kit/composition-objects)."""
    if not isinstance(confirm, dict):
        return [("must be an object", "")]
    found: list[tuple[str, str]] = []
    for name, limit in CONFIRM_LIMITS.items():
        part = confirm.get(name)
        if not isinstance(part, dict) or part.get("type") != "plain_text":
            found.append(("must be a plain_text object", f"/{name}"))
        elif not 0 < len(str(part.get("text", ""))) <= limit:
            found.append((f"must be between 1 and {limit} characters", f"/{name}/text"))
    if confirm.get("style", "primary") not in ("primary", "danger"):
        found.append(("must be one of primary, danger", "/style"))
    return found


@dataclass
class FakeSlack:
    """A recording Web API: every call is kept; messages get increasing ``ts``; blocks beyond
    Slack's Block Kit limits are refused as Slack does (``invalid_blocks``). ``said`` holds
    what people wrote (``conversations.replies`` reads it with the bot's posts); with
    ``assistant`` off, ``assistant.threads.setStatus`` is refused as for an app without the
    AI-app feature. ``members`` is who is in each channel (``conversations.members``, a page
    of ``limit`` at a time)."""

    server: LocalServer
    messages: list[dict[str, Any]] = field(default_factory=list)
    members: dict[str, list[str]] = field(default_factory=lambda: {
        CHANNEL: [REQUESTER, APPROVER, SECOND, BOT_USER]})
    said: list[dict[str, Any]] = field(default_factory=list)
    assistant: bool = False
    streaming: bool = False  # whether chat.startStream and its kin are this workspace's
    streams: dict[str, Stream] = field(default_factory=dict)
    refused: set[str] = field(default_factory=set)  # methods answering an internal_error
    _ts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_url(self) -> str:
        return self.server.url("/api/")

    def next_ts(self) -> str:
        with self._lock:
            self._ts += 1
            return f"1700000000.{self._ts:06d}"

    def calls(self, method: str) -> list[dict[str, Any]]:
        """The arguments of every call of ``method`` (``chat.postMessage``…), in order."""
        return [args_of(seen) for seen in list(self.server.seen)
                if seen.path == f"/api/{method}"]

    def posts(self) -> list[dict[str, Any]]:
        """Every ``chat.postMessage``, with the ``ts`` the fake answered."""
        with self._lock:
            return list(self.messages)

    def texts(self) -> list[str]:
        return [str(post.get("text")) for post in self.posts()]

    def say(self, user: str, text: str, ts: str, thread_ts: str | None = None) -> None:
        """A person's message in the channel, as ``conversations.replies`` will show it."""
        message = {"type": "message", "user": user, "text": text, "ts": ts, "team": TEAM}
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
        with self._lock:
            self.said.append(message)

    def final_blocks(self, ts: str) -> list[dict[str, Any]]:
        """The blocks the message ``ts`` shows now: a stream's as Slack draws its chunks, a
        posted message's as its last ``chat.update`` (or its post) left them."""
        if ts in self.streams:
            return self.streams[ts].blocks()
        last = ([c for c in self.updates_of(ts)] or
                [p for p in self.posts() if p.get("ts") == ts])[-1]
        blocks = last.get("blocks")
        return list(json.loads(blocks) if isinstance(blocks, str) else blocks or [])

    def updates_of(self, ts: str) -> list[dict[str, Any]]:
        """Every ``chat.update`` of the message ``ts``, in order."""
        return [call for call in self.calls("chat.update") if call.get("ts") == ts]

    def wait_for(self, done: Callable[[], bool], timeout_s: float = 20.0,
                 what: str = "the condition") -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if done():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; posts: {self.texts()}")


def args_of(seen: Seen) -> dict[str, Any]:
    body = seen.body.decode() if seen.body else ""
    if seen.headers.get("content-type", "").startswith("application/json"):
        return dict(json.loads(body or "{}"))
    return {name: values[0] for name, values in parse_qs(body).items()}


class Refused(Exception):
    """A Web API call Slack answers with ``{"ok": false, "error": …}`` (HTTP 200)."""

    def __init__(self, error: str, **details: Any) -> None:
        super().__init__(error)
        self.answer = {"ok": False, "error": error, **details}


def _web_api(slack: FakeSlack) -> dict[str, Any]:
    def answer(extra: Callable[[Seen], dict[str, Any]]) -> Callable[[Seen], Reply]:
        def route(seen: Seen) -> Reply:
            try:
                if seen.path.removeprefix("/api/") in slack.refused:
                    raise Refused("internal_error")
                body = {"ok": True, **extra(seen)}
            except Refused as refused:
                body = refused.answer
            return Reply(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return route

    def checked(seen: Seen) -> dict[str, Any]:
        args = args_of(seen)
        blocks = args.get("blocks")
        problems = block_kit_problems(json.loads(blocks) if isinstance(blocks, str) else blocks)
        if problems:
            raise Refused("invalid_blocks", errors=problems)
        return args

    def posted(seen: Seen) -> dict[str, Any]:
        args = checked(seen)
        ts = slack.next_ts()
        with slack._lock:
            slack.messages.append({**args, "ts": ts})
        return {"ts": ts, "channel": args.get("channel"), "message": args}

    def updated(seen: Seen) -> dict[str, Any]:
        args = checked(seen)
        return {"ts": args.get("ts"), "channel": args.get("channel")}

    def ephemeral(seen: Seen) -> dict[str, Any]:
        checked(seen)
        return {"message_ts": slack.next_ts()}

    def thread_status(_seen: Seen) -> dict[str, Any]:
        if not slack.assistant:
            raise Refused("method_not_supported_for_channel_type")
        return {}

    def start_stream(seen: Seen) -> dict[str, Any]:
        if not slack.streaming:
            raise Refused("unknown_method")
        args = args_of(seen)
        if not args.get("channel") or not args.get("thread_ts"):
            raise Refused("invalid_arguments")
        if str(args["channel"]).startswith("C") and not (
                args.get("recipient_user_id") and args.get("recipient_team_id")):
            raise Refused("invalid_arguments")  # in a channel a stream is for one person
        problems = chunk_problems(args.get("chunks"))
        if problems:
            raise Refused("invalid_chunks", errors=problems)
        ts = slack.next_ts()
        stream = Stream(ts, str(args["channel"]), str(args["thread_ts"]),
                        args.get("recipient_user_id"))
        stream.apply(args.get("chunks"))
        with slack._lock:
            slack.streams[ts] = stream
            slack.messages.append({"channel": args["channel"], "thread_ts": args["thread_ts"],
                                   "text": "", "ts": ts, "streamed": True})
        return {"ts": ts, "channel": args["channel"]}

    def streamed(seen: Seen, stop: bool) -> dict[str, Any]:
        args = args_of(seen)
        stream = slack.streams.get(str(args.get("ts")))
        if stream is None or stream.stopped:
            raise Refused("message_not_in_streaming_state")
        problems = chunk_problems(args.get("chunks")) + block_kit_problems(args.get("blocks"))
        if problems:
            raise Refused("invalid_chunks", errors=problems)
        with slack._lock:
            stream.apply(args.get("chunks"))
            if stop:
                stream.bottom = list(args.get("blocks") or [])
                stream.stopped = True
        return {"ts": stream.ts, "channel": stream.channel}

    def replies(seen: Seen) -> dict[str, Any]:
        args = args_of(seen)
        with slack._lock:
            every = [*slack.said, *({"type": "message", "user": BOT_USER, "bot_id": "B0BOT",
                                     **{k: m[k] for k in ("text", "ts", "thread_ts") if k in m}}
                                    for m in slack.messages)]
        wanted = str(args.get("ts"))
        found = next((m for m in every if m["ts"] == wanted), None)
        if found is None:
            raise Refused("thread_not_found")
        root = str(found.get("thread_ts") or found["ts"])
        thread = sorted((m for m in every if m["ts"] == root or m.get("thread_ts") == root),
                        key=lambda m: float(m["ts"]))
        return {"messages": thread, "has_more": False}

    def permalink(seen: Seen) -> dict[str, Any]:
        args = args_of(seen)
        ts = str(args.get("message_ts"))
        return {"channel": args.get("channel"),
                "permalink": f"https://t.slack.com/archives/{args.get('channel')}/"
                             f"p{ts.replace('.', '')}"}

    def user(seen: Seen) -> dict[str, Any]:
        """``users.info`` as Slack answers it: the user object with its profile."""
        person = str({**{k: v[0] for k, v in seen.query.items()}, **args_of(seen)}.get("user"))
        if person not in NAMES:
            raise Refused("user_not_found")
        name = NAMES[person]
        return {"user": {"id": person, "team_id": TEAM, "name": name, "deleted": False,
                         "real_name": name.title(), "is_bot": person == BOT_USER,
                         "profile": {"display_name": name, "real_name": name.title()}}}

    def members(seen: Seen) -> dict[str, Any]:
        args = args_of(seen)
        channel, size = str(args.get("channel")), int(args.get("limit") or 100)
        if channel not in slack.members:
            raise Refused("channel_not_found")
        start = int(args.get("cursor") or 0)
        everyone = slack.members[channel]
        more = start + size < len(everyone)
        return {"members": everyone[start:start + size],
                "response_metadata": {"next_cursor": str(start + size) if more else ""}}

    return {
        "/api/auth.test": answer(lambda _s: {"team_id": TEAM, "user_id": BOT_USER,
                                             "bot_id": "B0BOT", "url": "https://t.slack.com/"}),
        "/api/chat.postMessage": answer(posted),
        "/api/chat.update": answer(updated),
        "/api/chat.postEphemeral": answer(ephemeral),
        "/api/chat.startStream": answer(start_stream),
        "/api/chat.appendStream": answer(lambda seen: streamed(seen, stop=False)),
        "/api/chat.stopStream": answer(lambda seen: streamed(seen, stop=True)),
        "/api/assistant.threads.setStatus": answer(thread_status),
        "/api/conversations.replies": answer(replies),
        "/api/conversations.members": answer(members),
        "/api/users.info": answer(user),
        "/api/chat.getPermalink": answer(permalink),
        "/api/views.open": answer(lambda _s: {"view": {"id": "V0001"}}),
        "/api/usergroups.list": answer(lambda _seen: {"usergroups": [
            {"id": group, "team_id": TEAM, "name": handle.title(), "handle": handle,
             "is_usergroup": True} for group, handle in HANDLES.items()]}),
        "/api/usergroups.users.list": answer(
            lambda seen: {"users": GROUPS.get(str(args_of(seen).get("usergroup")), [])}),
    }


@contextmanager
def fake_slack(*, assistant: bool = False, streaming: bool = False) -> Iterator[FakeSlack]:
    with local_server() as server:
        slack = FakeSlack(server, assistant=assistant, streaming=streaming)
        server.routes.update(_web_api(slack))
        yield slack


# -- requests as Slack sends them -------------------------------------------------------------


def signed(body: str, *, secret: str = SECRET, timestamp: int | None = None,
           content_type: str = "application/json",
           retry: int | None = None) -> dict[str, str]:
    """Headers Slack sends with ``body``: v0 signature over ``v0:{timestamp}:{body}``."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256)
    headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest.hexdigest()}",
               "Content-Type": content_type}
    if retry is not None:
        headers.update({"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"})
    return headers


def mention_event(text: str, *, event_id: str, ts: str, user: str = REQUESTER,
                  thread_ts: str | None = None, kind: str = "app_mention") -> str:
    event: dict[str, Any] = {"type": kind, "user": user, "text": text, "ts": ts,
                             "channel": CHANNEL, "event_ts": ts, "team": TEAM}
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return json.dumps({"token": "verification-token", "team_id": TEAM, "api_app_id": "A0APP",
                       "event": event, "type": "event_callback", "event_id": event_id,
                       "event_time": int(time.time()),
                       "authorizations": [{"team_id": TEAM, "user_id": BOT_USER,
                                           "is_bot": True}]})


def reaction_event(name: str, *, user: str, ts: str, event_id: str,
                   channel: str = CHANNEL, item_user: str = REQUESTER) -> str:
    """A ``reaction_added`` callback: ``user`` reacted ``:name:`` to the message ``ts``."""
    event = {"type": "reaction_added", "user": user, "reaction": name, "item_user": item_user,
             "item": {"type": "message", "channel": channel, "ts": ts},
             "event_ts": f"{time.time():.6f}"}
    return json.dumps({"token": "verification-token", "team_id": TEAM, "api_app_id": "A0APP",
                       "event": event, "type": "event_callback", "event_id": event_id,
                       "event_time": int(time.time()),
                       "authorizations": [{"team_id": TEAM, "user_id": BOT_USER,
                                           "is_bot": True}]})


def command_body(text: str, *, user: str = REQUESTER, channel: str = CHANNEL) -> str:
    return urlencode({"token": "verification-token", "team_id": TEAM, "team_domain": "acme",
                      "channel_id": channel, "channel_name": "incidents", "user_id": user,
                      "user_name": user.lower(), "command": "/case", "text": text,
                      "api_app_id": "A0APP", "response_url": "https://hooks.slack.invalid/x",
                      "trigger_id": f"trigger-{time.monotonic_ns()}"})


def action_body(action_id: str, approval_id: str, *, user: str, message_ts: str,
                thread_ts: str | None = None) -> str:
    payload = {"type": "block_actions", "user": {"id": user, "team_id": TEAM},
               "api_app_id": "A0APP", "token": "verification-token", "team": {"id": TEAM},
               "channel": {"id": CHANNEL}, "trigger_id": f"trigger-{time.monotonic_ns()}",
               "container": {"type": "message", "message_ts": message_ts, "channel_id": CHANNEL},
               "message": {"ts": message_ts, "thread_ts": thread_ts, "type": "message"},
               "actions": [{"action_id": action_id, "block_id": "plan_decision",
                            "value": approval_id, "type": "button",
                            "action_ts": str(time.time())}]}
    return urlencode({"payload": json.dumps(payload)})


def reason_body(private_metadata: str, reason: str, *, user: str) -> str:
    payload = {"type": "view_submission", "user": {"id": user, "team_id": TEAM},
               "team": {"id": TEAM}, "api_app_id": "A0APP", "token": "verification-token",
               "trigger_id": f"trigger-{time.monotonic_ns()}",
               "view": {"id": "V0001", "type": "modal", "callback_id": "plan_reject_reason",
                        "private_metadata": private_metadata,
                        "state": {"values": {"reject_reason": {"reason": {
                            "type": "plain_text_input", "value": reason}}}}}}
    return urlencode({"payload": json.dumps(payload)})


FORM = "application/x-www-form-urlencoded"


# -- the agent, scripted ----------------------------------------------------------------------


@dataclass
class ScriptedAgent:
    """The agent protocol with a fixed reply (and a fixed think time); records every run and
    tells ``watch`` each of ``looks`` as a real run tells what it looks at."""

    reply: str = "Looking into it; the plan follows in this thread."
    delay_s: float = 0.0
    looks: tuple[str, ...] = ()
    runs: list[tuple[UUID, str, str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def converse(self, case_id: UUID, text: str, *, user: str, correlation_id: str,
                 watch: Any = None) -> str:
        with self._lock:
            self.runs.append((case_id, text, user, correlation_id))
        for look in self.looks:
            if watch is not None:
                watch(look)
        time.sleep(self.delay_s)
        return self.reply


# -- the running bot --------------------------------------------------------------------------


@dataclass
class Stack:
    """The bot as Slack reaches it, and what it runs on."""

    app: App
    slack: FakeSlack
    base: str
    http: httpx.Client
    stop_serving: Callable[[], None]

    def drain(self) -> None:
        """Stop taking Slack requests and wait until the work of every one acked so far has
        finished: what the bot did with them is final (its loop and Slack still run)."""
        self.stop_serving()

    def send(self, body: str, content_type: str = "application/json",
             **signing: Any) -> httpx.Response:
        return self.http.post(f"{self.base}/slack/events", content=body.encode(),
                              headers=signed(body, content_type=content_type, **signing))

    def mention(self, text: str, *, event_id: str, ts: str, retry: int | None = None,
                **kwargs: Any) -> httpx.Response:
        return self.send(mention_event(text, event_id=event_id, ts=ts, **kwargs), retry=retry)

    def react(self, name: str, *, user: str, ts: str, event_id: str,
              retry: int | None = None) -> httpx.Response:
        return self.send(reaction_event(name, user=user, ts=ts, event_id=event_id),
                         retry=retry)

    def command(self, text: str, *, user: str = REQUESTER,
                channel: str = CHANNEL) -> httpx.Response:
        return self.send(command_body(text, user=user, channel=channel), FORM)

    def click(self, action_id: str, approval_id: str, *, user: str, message_ts: str,
              thread_ts: str | None = None) -> httpx.Response:
        return self.send(action_body(action_id, approval_id, user=user, message_ts=message_ts,
                                     thread_ts=thread_ts), FORM)

    def plan_messages(self) -> list[dict[str, Any]]:
        """The posts carrying the Approve/Reject buttons."""
        return [post for post in self.slack.posts() if approval_of(post) is not None]

    def case_of_thread(self, thread_ts: str) -> UUID | None:
        from bot.slack_store import SlackStore

        return SlackStore(self.app.engine).case_of_thread(TEAM, CHANNEL, thread_ts)


def approval_of(post: dict[str, Any]) -> str | None:
    blocks = post.get("blocks")
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    for block in blocks or []:
        if block.get("type") == "actions":
            return str(block["elements"][0]["value"])
    return None


def settings_for(slack: FakeSlack, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "slack_bot_token": SecretStr("xoxb-test-token"),
        "slack_signing_secret": SecretStr(SECRET),
        "slack_api_url": slack.api_url, "incident_channel": CHANNEL,
        "approvers": APPROVERS, "loop_poll_s": 0.05, "slack_workers": 8,
        # plans' windows after the change (60-300 s) pass in 0.6-3 s
        "verify_time_scale": 0.01, "verify_poll_s": 0.2,
        **overrides}
    slack = {name: values.pop(name) for name in list(values) if name in SlackSettings.model_fields}
    return Settings(**with_stand_in(values)).with_layers(SlackSettings(**slack))


@contextmanager
def running_bot(engine: Engine, *, agent: Agent | None = None, loop: bool = True,
                real_agent: bool = False, assistant: bool = False, streaming: bool = False,
                consumers: Mapping[str, Any] | None = None,
                **overrides: Any) -> Iterator[Stack]:
    """The bot serving ``POST /slack/events`` on 127.0.0.1 with the in-process loop; with
    ``real_agent`` the agent package (converse and its planner) instead of a scripted agent;
    with ``assistant`` an app that may set the thread's status, with ``streaming`` one whose
    workspace streams (``chat.startStream``); ``consumers`` replace the
    loop's by name (a planner that proposes the test's plan)."""
    plugged: dict[str, Any] = {"notifier": SlackNotifier, **(consumers or {})}
    if real_agent:
        import agent as agent_package

        plugged.update(agent_package.consumers())
    else:
        agent = agent or ScriptedAgent()
    served: list[SlackEvents] = []
    # The templates' runbook script is allowed, as the demo allows it (its dry run passes).
    with fake_slack(assistant=assistant, streaming=streaming) as slack, \
            runbook_on_path() as runbook:
        overrides = {**runbook, **overrides}
        def mount(app: App, api: Any) -> None:
            served.append(SlackEvents(build_bolt(app, agent=agent), SECRET))
            mount_slack_events(app, api, served[-1])

        extensions = Extensions(consumers=plugged, routes=(mount,), chat=slack_chat,
                                members=group_members, investigation=thread_investigation)
        app = bootstrap(settings_for(slack, **overrides), engine=engine, extensions=extensions)
        config = uvicorn.Config(create_api(app), host="127.0.0.1", port=0, log_level="warning",
                                lifespan="off")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        in_process = InProcessLoop(app).start() if loop else None

        def stop_serving() -> None:  # again at the end: a second time changes nothing
            server.should_exit = True
            thread.join(timeout=10)
            for events in served:  # the work still running after its ack, before Slack goes
                events.close()

        try:
            with httpx.Client(timeout=10) as http:
                yield Stack(app, slack, f"http://127.0.0.1:{port}", http, stop_serving)
        finally:
            stop_serving()
            if in_process is not None:
                in_process.stop()
            app.close()


def card_of(slack: FakeSlack) -> dict[str, Any]:
    return next(p for p in slack.posts() if str(p.get("text")).startswith("🔎 Case"))


def texts(update: dict[str, Any]) -> str:
    blocks = update["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    return "\n".join(b["text"]["text"] if isinstance(b.get("text"), dict) else
                     " ".join(e["text"] for e in b.get("elements") or []) for b in blocks)


def to_the_gate(bot: Stack, ts: str, title: str = "checkout returns 500s"
                ) -> tuple[UUID, dict[str, Any]]:
    bot.mention(f"<@U0BOT> {title}", event_id=f"Ev{ts}", ts=ts)
    bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
    case_id = bot.case_of_thread(ts)
    assert case_id is not None
    return case_id, bot.plan_messages()[0]


def ask(bot: Stack, text: str, *, user: str = REQUESTER,
        channel: str = CHANNEL) -> dict[str, Any]:
    answer = bot.command(text, user=user, channel=channel)
    assert answer.status_code == 200
    body = dict(answer.json())
    assert body["response_type"] == "ephemeral" and body["blocks"]
    return body


def shown(body: dict[str, Any]) -> str:
    return " ".join(str(block.get("text", {}).get("text", "")) for block in body["blocks"])
