"""Socket Mode (``opsgate serve --socket-mode``): Slack's requests arrive over a WebSocket the bot
opens with ``SLACK_APP_TOKEN`` (``apps.connections.open``) instead of HTTP; the same Bolt app
answers them, acks timed into ``slack_ack_seconds``."""

from __future__ import annotations

import time

from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk.socket_mode.client import BaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest

from bot.agent import Agent
from bot.app import build_bolt
from bot.settings import SlackSettings
from core.bootstrap import App
from core.metrics import SLACK_ACK_SECONDS


class TimedSocketModeHandler(SocketModeHandler):
    """Bolt's Socket Mode handler, timing each ack."""

    def handle(self, client: BaseSocketModeClient, req: SocketModeRequest) -> None:
        started = time.perf_counter()
        try:
            super().handle(client, req)  # type: ignore[arg-type]  # Bolt narrows it
        finally:
            SLACK_ACK_SECONDS.observe(time.perf_counter() - started)


def start_socket_mode(app: App, *, agent: Agent | None = None) -> TimedSocketModeHandler:
    """Connect to Slack over Socket Mode in background threads; ``close()`` disconnects."""
    token = app.settings.layer(SlackSettings).slack_app_token
    if token is None:
        raise ValueError("SLACK_APP_TOKEN is not set: Socket Mode needs an app-level token")
    bolt = build_bolt(app, agent=agent, verify_requests=False)
    handler = TimedSocketModeHandler(bolt, token.get_secret_value())
    handler.connect()  # type: ignore[no-untyped-call]  # Bolt leaves it unannotated
    return handler
