"""The Slack ``ChatSink``: the notifier's posts go to the case's thread (``chat.postMessage``) and
decided plan messages are replaced in place (``chat.update``).

A case opened from Slack is bound to its thread a moment after the case commits; its first facts
may reach the sink before that, so the sink waits (bounded) while a case is being opened. A case
opened elsewhere (REST, alerts) gets a new thread in ``OPSGATE_INCIDENT_CHANNEL``.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from uuid import UUID

from slack_sdk import WebClient

from bot.store import SlackStore, Thread
from core.chat import Blocks

log = logging.getLogger(__name__)

# How long a post waits for a case being opened to get its thread. Opening is one gateway call
# and one row, but on a loaded machine (SQLite's single writer, Slack retrying the mention) it
# has taken over 3 s: waiting too little posts the case's first facts in a second thread.
BIND_WAIT_S = 15.0
OPENING_WINDOW_S = 30.0  # a reservation younger than this means "a case is being opened"


class SlackChatSink:
    """Posts a case's updates in its Slack thread."""

    def __init__(self, client: WebClient, store: SlackStore, *,
                 incident_channel: str | None = None, team: str | None = None) -> None:
        self.client = client
        self.store = store
        self.incident_channel = incident_channel
        self._team = team  # the workspace's id, which events carry (auth.test, once)

    def post(self, case_id: str, text: str, blocks: Blocks | None = None,
             thread_key: str | None = None) -> dict[str, Any]:
        thread = self._thread(UUID(case_id))
        if thread is None:
            return self._start_thread(UUID(case_id), text, blocks)
        reply = self.client.chat_postMessage(channel=thread.channel, thread_ts=thread.thread_ts,
                                             text=text, blocks=blocks)
        return {"ok": True, "ts": reply["ts"], "channel": thread.channel}

    def update(self, case_id: str, ts: str, text: str,
               blocks: Blocks | None = None) -> dict[str, Any]:
        thread = self.store.thread_of_case(UUID(case_id))
        if thread is None:
            return {"ok": False, "error": "the case has no Slack thread"}
        reply = self.client.chat_update(channel=thread.channel, ts=ts, text=text,
                                        blocks=blocks or [])
        return {"ok": True, "ts": reply["ts"], "channel": thread.channel}

    def _thread(self, case_id: UUID) -> Thread | None:
        deadline = time.monotonic() + BIND_WAIT_S
        while True:
            thread = self.store.thread_of_case(case_id)
            if thread is not None or time.monotonic() >= deadline:
                return thread
            if not self.store.opening(OPENING_WINDOW_S):
                return None
            time.sleep(0.05)

    def _start_thread(self, case_id: UUID, text: str, blocks: Blocks | None) -> dict[str, Any]:
        if not self.incident_channel:
            log.warning("case %s has no Slack thread and OPSGATE_INCIDENT_CHANNEL is not set; "
                        "update not posted: %s", case_id, text)
            return {"ok": False, "ts": None, "error": "no thread and no incident channel"}
        reply = self.client.chat_postMessage(channel=self.incident_channel, text=text,
                                             blocks=blocks)
        ts = str(reply["ts"])
        self.store.adopt_thread(self.team(), self.incident_channel, ts, case_id)
        return {"ok": True, "ts": ts, "channel": self.incident_channel}

    def team(self) -> str:
        if self._team is None:
            self._team = str(self.client.auth_test().get("team_id") or "")
        return self._team
