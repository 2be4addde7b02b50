"""The seed's curl session against a real ``opsgate serve --no-loop``: no relay, no consumers,
every stage asked for over HTTP (create → start_analysis → plan/generate → gate/eval →
adapter/exec → verify/run) until the case is CLOSED."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.support.metrics import STAND_IN_ENV
from tests.support.peers import free_port
from tests.support.processes import Process, clean_env

TOKEN = "walkthrough-token"
DEADLINE_S = 60.0

class Api:
    """curl, in short: every write with its key and the operator's token."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=30,
                                 headers={"Authorization": f"Bearer {TOKEN}"})

    def post(self, path: str, body: dict[str, Any], key: str) -> httpx.Response:
        return self.http.post(path, json=body, headers={"Idempotency-Key": key})

    def patch(self, path: str, body: dict[str, Any], key: str) -> httpx.Response:
        return self.http.patch(path, json=body, headers={"Idempotency-Key": key})


def test_the_seeds_curl_session_closes_a_case_over_http(tmp_path):
    port = free_port()
    env = clean_env(OPSGATE_API_TOKEN=TOKEN, OPSGATE_AUTO_APPROVE="noop_only",
                    OPSGATE_VERIFY_TIME_SCALE="0.01",  # the noop plan's 60 s window: 0.6 s
                    **STAND_IN_ENV)
    serve = Process("serve", ("serve", "--port", str(port), "--no-loop"), env,
                    tmp_path / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        serve.start()
        serve.wait_for_output("loop: off (--no-loop)")
        serve.wait_healthy(base, DEADLINE_S)
        api = Api(base)

        # 1) create the case
        created = api.post("/case/create", {"title": "p95 spike", "tenant": "t-001"}, "c1")
        assert created.status_code == 201, created.text
        case = created.json()["data"]["case_id"]

        # 2) start the analysis
        started = api.patch(f"/case/{case}/transition",
                            {"event": "start_analysis", "actor": "analyst@svc"}, "a1")
        assert started.json()["data"]["status"] == "ANALYZING", started.text

        # 3) generate the plan: the analysis is concluded, the plan proposed
        proposed = api.post("/plan/generate", {"case_id": case, "template": "noop"}, "p1")
        assert proposed.json()["data"]["status"] == "WAIT_GATE", proposed.text

        # 4) the gate: a noop plan approves itself under OPSGATE_AUTO_APPROVE=noop_only
        gate = api.post("/gate/eval", {"case_id": case}, "g1")
        assert gate.json()["data"]["status"] == "EXECUTING", gate.text
        again = api.post("/gate/eval", {"case_id": case}, "g1")
        assert (again.content, again.headers["idempotent-replayed"]) == (gate.content, "true")

        # 5) the seed's body asks for a script: refused, nothing runs; the plan's step runs
        side_door = api.post("/adapter/exec", {"case_id": case, "adapter": "script",
                                               "script": "echo ok"}, "e0")
        assert side_door.status_code == 422, side_door.text
        assert side_door.json()["error"]["code"] == "off_plan"
        executed = api.post("/adapter/exec", {"case_id": case}, "e1")
        assert executed.json()["data"]["status"] == "VERIFYING", executed.text
        assert [step["action"] for step in executed.json()["data"]["ran"]] == ["noop"]

        # 6) verify: 202 while the window after the change runs, then CLOSED
        answers = _verify_until_settled(api, case)
        assert answers[-1].status_code == 200
        assert answers[-1].json()["data"]["status"] == "CLOSED"
        assert {answer.status_code for answer in answers[:-1]} <= {202}

        events = [row["event"] for row in api.http.get(f"/case/{case}/timeline").json()["data"]]
        assert [event for event in events if event != "verify_reading"] == [
            "case_opened", "start_analysis", "analysis_done", "plan_ready", "gate_approved",
            "step_result", "exec_done", "verify_result", "verify_pass"]
        assert serve.terminate() == 0
    finally:
        serve.close()


def _verify_until_settled(api: Api, case: str) -> list[httpx.Response]:
    """POST /verify/run, each under a new key (a new reading), until the case leaves
    VERIFYING; bounded by the block's deadline (6.6 s at this time scale) and a margin."""
    answers: list[httpx.Response] = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        answer = api.post("/verify/run", {"case_id": case}, f"v{len(answers) + 1}")
        assert answer.status_code in (200, 202), answer.text
        answers.append(answer)
        if answer.status_code == 200:
            return answers
        time.sleep(0.2)  # the next reading, as OPSGATE_VERIFY_POLL_S would space them
    raise AssertionError(f"still VERIFYING after {len(answers)} readings")
