"""``opsgate serve`` and the names it answers to (issue 24, finding 5), as an operator runs it:
bound to loopback it answers the loopback names only; bound elsewhere it needs
``OPSGATE_ALLOWED_HOSTS`` and says so in one line before anything starts."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import httpx

from tests.support.peers import free_port
from tests.support.processes import Process, clean_env, command


def test_bound_beyond_loopback_serve_needs_the_setting_in_one_line(tmp_path: Path) -> None:
    refused = subprocess.run(command("serve", "--host", "0.0.0.0", "--port", str(free_port())),
                             cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                             timeout=60, check=False, stdin=subprocess.DEVNULL)

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith("opsgate: error: OPSGATE_ALLOWED_HOSTS is not set: "
                                     "opsgate serve binds 0.0.0.0, not loopback")
    assert len(refused.stderr.strip().splitlines()) == 1 and refused.stdout == ""
    assert not (tmp_path / "opsgate.db").exists(), "nothing may start without the setting"


def test_the_laptop_default_refuses_a_rebound_host_and_origin(tmp_path: Path) -> None:
    port = free_port()
    serve = Process("serve", ("serve", "--port", str(port), "--no-loop"), clean_env(),
                    tmp_path / "serve.log").start()
    base = f"http://127.0.0.1:{port}"
    try:
        serve.wait_for_output("Uvicorn running")
        with httpx.Client(base_url=base, timeout=10) as http:
            answers = [http.post("/case/create", json={"title": "Rebound"},
                                 headers={"Idempotency-Key": uuid.uuid4().hex, **foreign})
                       for foreign in ({"Host": "evil.example"},
                                       {"Origin": "http://evil.example"},
                                       {"Host": f"localhost:{port}",
                                        "Origin": f"http://localhost:{port}"})]
    finally:
        serve.terminate()
        serve.close()

    assert [answer.status_code for answer in answers] == [403, 403, 201]
    assert [answer.json()["error"]["code"] for answer in answers[:2]] == [
        "host_not_allowed", "origin_not_allowed"]
    assert answers[2].json()["data"]["title"] == "Rebound"
    assert "hosts: answers to localhost, 127.0.0.1, [::1]" in serve.output()
