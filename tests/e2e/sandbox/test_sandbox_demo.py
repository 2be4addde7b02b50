"""``opsgate demo`` as a subprocess, driven over the sandbox's own HTTP endpoints (no browser):
the same story on the production engines (``--postgres``, ``--redis``: PostgreSQL and Redis
Streams), and the refusals a visitor may meet when starting it."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
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


WORLD = re.compile(r"the Kubernetes API is a stand-in \(a recorded world at (https://[0-9.:]+)\)")


def checkout_changes(api: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{api}/changes", params={"component": "checkout"}, timeout=5)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["data"]["changes"])


def kube_folders(temp: Path) -> list[Path]:
    return [found for found in temp.iterdir() if found.name.startswith("opsgate-demo-kube-")]


def test_the_demo_serves_its_world_and_records_its_deploy_at_each_start(tmp_path):
    """The recorded Kubernetes world answers only with the demo's token, the checkout deploy it
    remembers is in the change store once per start (a restart on the same database records it
    at the world's new time, refusing nothing), and stopping takes the world and its kubeconfig
    folder away."""
    port, api_port = free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    temp = tmp_path / "tmp"
    temp.mkdir()
    demo = Process("demo", ("demo", "--port", str(port), "--api-port", str(api_port)),
                   clean_env(TMPDIR=str(temp)), tmp_path / "demo.log")
    try:
        recorded = []
        for _start in range(2):
            demo.start()
            demo.wait_for_output("open http://127.0.0.1")
            said = WORLD.search(demo.output_of_this_start())
            assert said, demo.output_of_this_start()
            assert "the catalog is a stand-in (bot/sandbox/catalog)" in demo.output_of_this_start()
            unsigned = httpx.get(f"{said.group(1)}/api/v1/namespaces/shop/pods", verify=False,
                                 timeout=5)
            assert unsigned.status_code == 401, unsigned.text  # served, and only to the demo
            assert len(kube_folders(temp)) == 1, list(temp.iterdir())
            recorded.append(checkout_changes(api))
            assert demo.terminate() == 0
            assert kube_folders(temp) == []  # the kubeconfig went with the demo
            with pytest.raises(httpx.TransportError):
                httpx.get(f"{said.group(1)}/version", verify=False, timeout=2)
        first, second = recorded
        assert len(first) == 1 and len(second) == 2, recorded
        deploy = first[0]
        assert deploy["change_id"].startswith("demo:shop/checkout:12@"), deploy
        assert (deploy["component"], deploy["namespace"], deploy["version"], deploy["actor"],
                deploy["kind"]) == ("checkout", "shop", "v1.8.0", "ci", "deploy")
        assert deploy["summary"] == "checkout v1.8.0: new cart pricing"
        assert deploy in second and second[0]["change_id"] != deploy["change_id"]
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
