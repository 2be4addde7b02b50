"""The investigation as the case's thread shows it while the agent works: one message that Slack
draws as a plan (a ``plan`` block) with a task per look, each moving pending → in progress →
complete or error, with the gist of what it read as the task's output and its sources' links.

Where the workspace streams (``chat.startStream`` with ``task_display_mode`` plan, then
``chat.appendStream`` with one ``task_update`` chunk per change, ``chat.stopStream``), the
message is streamed to the person who opened the case; elsewhere (no streaming, no person to
stream to) it is posted (``chat.postMessage``) and replaced in place (``chat.update``) with the
same plan. When the agent records its findings, the plan is finished (a look the run takes
after that, such as filling in a plan template, is not added to it) and the findings message
(``bot.findings``) follows it, once per findings: a run retried with the same findings replays
the first post.

Nothing here stops the investigation: a refused call is logged, and the run goes on."""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.findings import findings_message
from bot.slack_store import SlackStore, Thread
from core.gateway import ToolCall
from core.gateway.keys import text_key
from core.investigate.progress import LookSeen

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

WORKING = "Investigating the incident"
DONE = "What opsgate looked at"
TITLE_CHARS = 250  # a plan's and a task's title, well within Slack's 256 for streamed chunks
OUTPUT_CHARS = 250  # a task's output: one line
_PERSON = re.compile(r"^[UW][A-Z0-9]{2,}$")  # a Slack user id, whom a stream is for


# -- the blocks ---------------------------------------------------------------------------------


def rich_text(text: str) -> dict[str, Any]:
    """One line of plain text as the ``rich_text`` object a task's output is."""
    return {"type": "rich_text", "elements": [{"type": "rich_text_section",
                                               "elements": [{"type": "text", "text": text}]}]}


def task_id(seen: LookSeen) -> str:
    return f"look_{seen.number}"


def task(seen: LookSeen) -> dict[str, Any]:
    """A look as one task of the plan block (docs.slack.dev: task card block's fields)."""
    card: dict[str, Any] = {"task_id": task_id(seen), "title": _line(seen.title, TITLE_CHARS),
                            "status": seen.state}
    if seen.gist:
        card["output"] = rich_text(_line(seen.gist, OUTPUT_CHARS))
    if seen.sources:
        card["sources"] = [{"type": "url", "url": link.url, "text": _line(link.label, 100)}
                           for link in seen.sources]
    return card


def plan_block(title: str, looks: list[LookSeen], block_id: str) -> dict[str, Any]:
    return {"type": "plan", "block_id": block_id, "title": _line(title, TITLE_CHARS),
            "tasks": [task(seen) for seen in looks]}


def task_chunk(seen: LookSeen) -> dict[str, Any]:
    """A look as a streamed ``task_update`` chunk (its output a plain string)."""
    chunk: dict[str, Any] = {"type": "task_update", "id": task_id(seen),
                             "title": _line(seen.title, TITLE_CHARS), "status": seen.state}
    if seen.gist:
        chunk["output"] = _line(seen.gist, OUTPUT_CHARS)
    if seen.sources:
        chunk["sources"] = [{"type": "url", "url": link.url, "text": _line(link.label, 100)}
                            for link in seen.sources]
    return chunk


def fallback_text(title: str, looks: list[LookSeen]) -> str:
    """The message's text (notifications, screen readers): how far the looks are."""
    done = sum(seen.state in ("complete", "error") for seen in looks)
    failed = sum(seen.state == "error" for seen in looks)
    said = f"{title}: {done} of {len(looks)} look(s) done"
    return said + (f", {failed} could not be read" if failed else "")


def _line(text: str, limit: int) -> str:
    line = " ".join(str(text).split()) or "…"
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"


# -- the thread ---------------------------------------------------------------------------------


@dataclass
class Workspace:
    """What one process knows of its Slack workspace: its client, where cases' threads are,
    and whether it streams (asked once: a refusal means post-and-update from then on)."""

    app: App
    client: WebClient
    store: SlackStore
    streams: bool = True


_WORKSPACES: dict[int, Workspace] = {}
_LOCK = threading.Lock()


def shown_in_thread(app: App, case_id: UUID) -> SlackInvestigation | None:
    """The investigation of ``case_id`` as its Slack thread shows it (``Extensions.
    investigation``); None when Slack is off or the case has no thread yet."""
    from bot.app import slack_configured, web_client
    from bot.settings import SlackSettings

    slack = app.settings.layer(SlackSettings)
    if not slack_configured(slack):
        return None
    with _LOCK:
        workspace = _WORKSPACES.get(id(app))
        if workspace is None or workspace.app is not app:
            workspace = _WORKSPACES[id(app)] = Workspace(app, web_client(slack),
                                                         SlackStore(app.engine))
    thread = workspace.store.thread_of_case(case_id)
    if thread is None:
        return None
    return SlackInvestigation(workspace, case_id, thread, _recipient(app, case_id))


def _recipient(app: App, case_id: UUID) -> str | None:
    """The person who opened the case, when a person did (a stream is addressed to one)."""
    opened = next((row for row in app.cases.timeline(case_id) if row["event"] == "case_opened"),
                  None)
    actor = None if opened is None else str(opened["actor"])
    return actor if actor is not None and _PERSON.match(actor) else None


@dataclass
class SlackInvestigation:
    """One agent run's looks in one message of the case's thread, then its findings."""

    workspace: Workspace
    case_id: UUID
    thread: Thread
    recipient: str | None
    looks: dict[int, LookSeen] = field(default_factory=dict)
    ts: str | None = None  # the plan message, once posted
    streaming: bool = False
    finished: bool = False
    block_id: str = field(default_factory=lambda: f"investigation_{uuid4().hex[:12]}")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def client(self) -> WebClient:
        return self.workspace.client

    def look(self, seen: LookSeen) -> None:
        with self._lock:
            if self.finished:
                return
            self.looks[seen.number] = seen
            if self.ts is None:
                self._start()
            elif self.streaming:
                self._call("chat.appendStream", self.client.chat_appendStream,
                           channel=self.thread.channel, ts=self.ts, chunks=[task_chunk(seen)])
            else:
                self._update(WORKING)

    def found(self, summary: str) -> None:
        with self._lock:
            self._finish()
            if self.looks:
                self._post_findings(summary)

    def ended(self) -> None:
        with self._lock:
            self._finish()

    # -- the plan message ---------------------------------------------------------------------

    def _ordered(self) -> list[LookSeen]:
        return [self.looks[n] for n in sorted(self.looks)]

    def _start(self) -> None:
        call = ToolCall("slack.investigation", {"case_id": str(self.case_id),
                                                "block_id": self.block_id},
                        "slack-bot", f"slack:{self.thread.team}:{self.thread.channel}:"
                        f"{self.thread.thread_ts}", business_key=f"investigation:{self.block_id}")
        result = self.workspace.app.gateway.run(call, lambda _args: self._open(), wait_s=5.0)
        if result.error is None and isinstance(result.result, dict):
            self.ts = result.result.get("ts")
            self.streaming = bool(result.result.get("streaming"))
        else:
            log.warning("case %s: the investigation's message was not posted: %s",
                        self.case_id, result.error)

    def _open(self) -> dict[str, Any]:
        """Stream where the workspace and the case allow it, else post."""
        looks = self._ordered()
        if self.workspace.streams and self.recipient is not None:
            try:
                opened = self.client.chat_startStream(
                    channel=self.thread.channel, thread_ts=self.thread.thread_ts,
                    recipient_user_id=self.recipient, recipient_team_id=self.thread.team,
                    task_display_mode="plan",
                    chunks=[{"type": "plan_update", "title": WORKING},
                            *(task_chunk(seen) for seen in looks)])
                return {"ts": opened["ts"], "streaming": True}
            except SlackApiError as refused:
                self.workspace.streams = False
                log.info("chat.startStream refused (%s): the investigation is posted and "
                         "updated instead", refused.response.get("error"))
        posted = self.client.chat_postMessage(
            channel=self.thread.channel, thread_ts=self.thread.thread_ts,
            text=fallback_text(WORKING, looks),
            blocks=[plan_block(WORKING, looks, self.block_id)])
        return {"ts": posted["ts"], "streaming": False}

    def _update(self, title: str) -> None:
        looks = self._ordered()
        assert self.ts is not None
        self._call("chat.update", self.client.chat_update, channel=self.thread.channel,
                   ts=self.ts, text=fallback_text(title, looks),
                   blocks=[plan_block(title, looks, self.block_id)])

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self.ts is None:
            return
        for number, seen in list(self.looks.items()):  # a look cut off never reads on
            if seen.state in ("pending", "in_progress"):
                self.looks[number] = LookSeen(seen.number, seen.tool, seen.title, "error",
                                              "not read: the run ended before it answered")
        if self.streaming:
            self._call("chat.stopStream", self.client.chat_stopStream,
                       channel=self.thread.channel, ts=self.ts,
                       chunks=[{"type": "plan_update", "title": DONE},
                               *(task_chunk(seen) for seen in self._ordered())])
        else:
            self._update(DONE)

    def _call(self, method: str, send: Any, **args: Any) -> None:
        try:
            send(**args)
        except SlackApiError as refused:
            log.warning("case %s: %s refused (%s)", self.case_id, method,
                        refused.response.get("error"))

    # -- the findings -------------------------------------------------------------------------

    def _post_findings(self, summary: str) -> None:
        app = self.workspace.app
        text, blocks = findings_message(app, self.case_id, summary, self._ordered())
        thread = self.thread
        call = ToolCall("slack.findings", {"case_id": str(self.case_id), "summary": summary},
                        "slack-bot", f"slack:{thread.team}:{thread.channel}:{thread.thread_ts}",
                        business_key=f"findings:{self.case_id}:{text_key(summary)}")

        def post(_args: Any) -> dict[str, Any]:
            reply = self.client.chat_postMessage(channel=thread.channel,
                                                 thread_ts=thread.thread_ts, text=text,
                                                 blocks=blocks)
            return {"ts": reply["ts"]}

        result = app.gateway.run(call, post, wait_s=5.0)
        if result.error is not None:
            log.warning("case %s: the findings were not posted: %s", self.case_id, result.error)
