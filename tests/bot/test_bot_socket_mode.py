"""Socket Mode: the bot opens the WebSocket ``apps.connections.open`` names (a local server
playing Slack's envelopes), acks each envelope by its id, answers slash commands in the ack and
does an event's work after it; ``opsgate serve --socket-mode`` does the same as a process."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
from sqlalchemy import Engine
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

from bot.socket_mode import start_socket_mode
from core.bootstrap import Extensions, bootstrap
from core.db.database import make_engine
from core.migrate import upgrade_engine
from tests.support.local_http import Reply
from tests.support.peers import free_port
from tests.support.slack import (
    FORM,
    SECRET,
    ScriptedAgent,
    command_body,
    fake_slack,
    mention_event,
    settings_for,
    signed,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SocketSlack:
    """Slack's Socket Mode endpoint: says hello, sends queued envelopes, records the acks."""

    url: str = ""
    envelopes: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    acks: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        ws.send(json.dumps({"type": "hello", "num_connections": 1,
                            "connection_info": {"app_id": "A0APP"},
                            "debug_info": {"host": "local", "approximate_connection_time": 3600}}))
        while not self.stop.is_set():
            with suppress(queue.Empty):
                ws.send(json.dumps(self.envelopes.get(timeout=0.02)))
            try:
                self.acks.append(json.loads(ws.recv(timeout=0.02)))
            except TimeoutError:
                continue
            except ConnectionClosed:
                return

    def ack_of(self, envelope_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for ack in list(self.acks):
                if ack.get("envelope_id") == envelope_id:
                    return ack
            time.sleep(0.02)
        raise AssertionError(f"no ack of {envelope_id}; acks: {self.acks}")


@contextmanager
def socket_slack() -> Iterator[SocketSlack]:
    fake = SocketSlack()
    with serve(fake.handle, "127.0.0.1", 0) as server:
        fake.url = f"ws://127.0.0.1:{server.socket.getsockname()[1]}/link/?ticket=t"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield fake
        finally:
            fake.stop.set()
            server.shutdown()
            thread.join(timeout=5)


def command_envelope(envelope_id: str, text: str) -> dict[str, Any]:
    payload = {k: v[0] for k, v in parse_qs(command_body(text)).items()}
    return {"envelope_id": envelope_id, "type": "slash_commands", "payload": payload,
            "accepts_response_payload": True}


def test_socket_mode_acks_envelopes_and_does_the_work_after(sqlite_engine: Engine) -> None:
    agent = ScriptedAgent(reply="Socket reply", delay_s=0.5)
    with fake_slack() as slack, socket_slack() as ws:
        slack.server.routes["/api/apps.connections.open"] = Reply(
            200, json.dumps({"ok": True, "url": ws.url}).encode(),
            {"Content-Type": "application/json"})
        settings = settings_for(slack, slack_app_token="xapp-test", slack_signing_secret=None)
        app = bootstrap(settings, engine=sqlite_engine, extensions=Extensions())
        handler = start_socket_mode(app, agent=agent)
        try:
            event = json.loads(mention_event("<@U0BOT> socket check", event_id="EvSock",
                                             ts="40.000100"))
            ws.envelopes.put({"envelope_id": "env-1", "type": "events_api", "payload": event,
                              "accepts_response_payload": False, "retry_attempt": 0})
            ws.envelopes.put(command_envelope("env-2", "help"))
            assert ws.ack_of("env-1") == {"envelope_id": "env-1"}
            answer = ws.ack_of("env-2")["payload"]
            assert answer["response_type"] == "ephemeral" and "/case new" in json.dumps(answer)
            slack.wait_for(lambda: "Socket reply" in slack.texts(), what="the agent's reply")
            opens = [s for s in slack.server.seen if s.path == "/api/apps.connections.open"]
            assert opens and opens[0].headers["authorization"] == "Bearer xapp-test"
            # a redelivery of the same event (another connection's retry) does nothing more
            ws.envelopes.put({"envelope_id": "env-3", "type": "events_api", "payload": event,
                              "accepts_response_payload": False, "retry_attempt": 1})
            ws.ack_of("env-3")
            time.sleep(0.8)
            assert len(agent.runs) == 1
        finally:
            handler.close()
            app.close()


def post_when_up(url: str, body: str, within_s: float = 20.0) -> httpx.Response:
    """POST once the server listens (uvicorn starts after the Socket Mode connection)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return httpx.post(url, content=body, headers=signed(body, content_type=FORM),
                              timeout=10)
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_opsgate_serve_socket_mode_process(tmp_path: Path) -> None:
    with fake_slack() as slack, socket_slack() as ws:
        slack.server.routes["/api/apps.connections.open"] = Reply(
            200, json.dumps({"ok": True, "url": ws.url}).encode(),
            {"Content-Type": "application/json"})
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPSGATE_", "SLACK_", "OPENAI_"))}
        env.update({"OPSGATE_DATABASE_URL": f"sqlite:///{tmp_path / 'o.db'}",
                    "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_APP_TOKEN": "xapp-test",
                    "SLACK_SIGNING_SECRET": SECRET, "OPSGATE_SLACK_API_URL": slack.api_url})
        migrated = make_engine(env["OPSGATE_DATABASE_URL"])
        upgrade_engine(migrated)
        migrated.dispose()
        port = free_port()
        serve_cmd = [sys.executable, "-m", "bot.cli", "serve", "--socket-mode", "--port",
                     str(port), "--no-loop"]
        process = subprocess.Popen(serve_cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)
        try:
            ws.envelopes.put(command_envelope("env-cli", "list"))
            answer = ws.ack_of("env-cli", timeout_s=30)["payload"]
            assert answer["response_type"] == "ephemeral" and "Latest cases" in answer["text"]
            # the same process serves Slack's HTTP requests too, signed
            body = command_body("help")
            over_http = post_when_up(f"http://127.0.0.1:{port}/slack/events", body)
            assert over_http.status_code == 200 and "/case new" in over_http.text
            forged = httpx.post(f"http://127.0.0.1:{port}/slack/events", content=body,
                                headers=signed(body, content_type=FORM, secret="wrong"))
            assert forged.status_code == 401
        finally:
            process.terminate()
            output = process.communicate(timeout=20)[0].decode()
        assert "connected over Socket Mode" in output
