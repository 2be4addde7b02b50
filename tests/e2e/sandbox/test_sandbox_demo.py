"""``opsgate demo`` as a subprocess, driven over the sandbox's own HTTP endpoints (no browser):
the same story on the production engines (``--postgres``, ``--redis``: PostgreSQL and Redis
Streams), and the refusals a visitor may meet when starting it."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from bot.sandbox.serving import free_port
from bot.sandbox.workspace import APPROVER, REQUESTER
from tests.support.processes import Process, clean_env, command
from tests.support.servers import REDIS_URL

WAIT_S = 30.0


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = probe()
        except httpx.TransportError:
            found = None
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def plan_message(page: str, user: str) -> dict[str, Any] | None:
    state = httpx.get(f"{page}/sandbox/state", params={"user": user}).json()
    for message in state["messages"]:
        for block in message.get("blocks") or []:
            if block["type"] == "actions" and any(e.get("text", {}).get("text") == "Approve"
                                                  for e in block["elements"]):
                return message
    return None


@pytest.mark.postgres
@pytest.mark.redis
def test_demo_on_postgres_and_redis_streams_closes_an_approved_case(
        tmp_path, pg_engine, redis_client, redis_prefix):
    port, api_port = free_port(), free_port()
    page, api = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{api_port}"
    postgres = pg_engine.url.render_as_string(hide_password=False)
    demo = Process("demo", ("demo", "--port", str(port), "--api-port", str(api_port),
                            "--postgres", postgres, "--redis", REDIS_URL),
                   clean_env(OPSGATE_STREAM_PREFIX=f"{redis_prefix}stream:",
                             OPSGATE_GATEWAY_KEY_PREFIX=f"{redis_prefix}gw:"),
                   tmp_path / "demo.log")
    try:
        demo.start()
        demo.wait_for_output("open http://127.0.0.1")
        log = (tmp_path / "demo.log").read_text()
        assert "PostgreSQL, Redis Streams" in log, log
        said = httpx.post(f"{page}/sandbox/say",
                          json={"user": REQUESTER.id, "text": "@opsgate orders API 5xx"})
        assert said.status_code == 202
        plan = wait_for("the plan message", lambda: plan_message(page, APPROVER.id))
        clicked = httpx.post(f"{page}/sandbox/click", json={
            "user": APPROVER.id, "message_ts": plan["ts"], "action_id": "plan_approve"})
        assert clicked.status_code == 202
        case = wait_for("the case to close", lambda: next(
            (c for c in httpx.get(f"{api}/case").json()["data"] if c["status"] == "CLOSED"),
            None))
        assert case["title"] == "orders API 5xx"
        assert any(redis_client.scan_iter(match=f"{redis_prefix}stream:*"))  # the bus was Redis
        assert demo.terminate() == 0
    finally:
        demo.close()


def test_demo_refuses_a_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(command("demo", "--port", str(port)), cwd=tmp_path,
                                env=clean_env(), capture_output=True, text=True, timeout=60,
                                check=False)
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is already in use" in result.stderr
    assert "--port" in result.stderr and "Traceback" not in result.stderr


def test_demo_help_says_how_to_use_it(tmp_path):
    result = subprocess.run(command("demo", "--help"), cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for words in ("--port", "--postgres", "--redis", "--chaos", "--walk", "127.0.0.1:3000"):
        assert words in text, text


def test_demo_will_not_write_to_a_postgres_it_was_not_given_on_the_command_line(tmp_path):
    result = subprocess.run(
        command("demo", "--port", str(free_port())), cwd=tmp_path, capture_output=True,
        env=clean_env(OPSGATE_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:1/prod"),
        text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "OPSGATE_DATABASE_URL is not a SQLite file" in result.stderr
    assert "opsgate demo --postgres URL" in result.stderr and "Traceback" not in result.stderr
