"""The Slack ``ChatSink``: the notifier's posts go to the case's thread (``chat.postMessage``) and
decided plan messages are replaced in place (``chat.update``).

A case opened from Slack commits with its thread, so its first facts find the thread; a case
opened elsewhere (REST, alerts) gets a new thread in ``OPSGATE_INCIDENT_CHANNEL``.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from slack_sdk import WebClient

from bot.mrkdwn import drawn
from bot.slack_store import SlackStore
from core.chat import Blocks, Said

log = logging.getLogger(__name__)


class SlackChatSink:
    """Posts a case's updates in its Slack thread."""

    def __init__(self, client: WebClient, store: SlackStore, *,
                 incident_channel: str | None = None, team: str | None = None) -> None:
        self.client = client
        self.store = store
        self.incident_channel = incident_channel
        self._team = team  # the workspace's id, which events carry (auth.test, once)

    def say(self, case_id: str, said: Said, thread_key: str | None = None) -> dict[str, Any]:
        """What the core says (the agent's update), drawn in mrkdwn (``drawn``)."""
        return self.post(case_id, drawn(said), thread_key=thread_key)

    def post(self, case_id: str, text: str, blocks: Blocks | None = None,
             thread_key: str | None = None) -> dict[str, Any]:
        thread = self.store.thread_of_case(UUID(case_id))
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
