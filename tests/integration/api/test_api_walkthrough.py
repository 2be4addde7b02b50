"""The seed's walkthrough over REST on SQLite and PostgreSQL: ``POST /plan/generate`` right after
``start_analysis``, ``/gate/eval``, ``/adapter/exec`` and ``/verify/run`` doing what the loop's
gatekeeper, executor and verifier do, as the caller's principal; their refusals, and what a
repeat (same key or a new one) does and does not do again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from core.api import create_api
from core.api.walkthrough.consumers import Consumers
from core.bootstrap import App
from core.db.tables import case_timeline, outbox
from core.domain.plans import plan_hash
from core.steps.runner import StepRunner
from tests.support.api import assert_error, bearer, data, new_key, rows
from tests.support.cases import APPROVERS
from tests.support.clock import Clock
from tests.support.plan_runs import (
    counting_script,
    executing_case,
    make_app,
    plan_of,
    runs,
    script_step,
)

NOOP_STEP = {"action": "noop", "params": {}, "timeout_s": 10, "retry": 0}
WINDOW = {"metric": "error_rate", "below": 0.01, "for_s": 60}  # static error_rate is 0.001


@dataclass
class World:
    app: App
    client: TestClient
    clock: Clock
    script: Path
    counter: Path

    def post(self, path: str, body: dict[str, Any], key: str | None = None,
             **headers: str) -> Any:
        return self.client.post(path, json=body,
                                headers={"Idempotency-Key": key or new_key(), **headers})

    def stage(self, path: str, case_id: Any, key: str | None = None, **body: Any) -> Any:
        return self.post(path, {"case_id": str(case_id), **body}, key)

    def case(self, case_id: Any) -> dict[str, Any]:
        """The case as the service reads it (the test's principals need no token for that)."""
        return self.app.cases.get_case(UUID(str(case_id)))

    def timeline(self, case_id: Any) -> list[dict[str, Any]]:
        return self.app.cases.timeline(UUID(str(case_id)))

    def events(self, case_id: Any) -> list[str]:
        return [row["event"] for row in self.timeline(case_id)]

    def executing(self, *steps: dict[str, Any], verify: dict[str, Any] | None = None,
                  rollback: Any = None) -> Any:
        """A case whose plan of ``steps`` a person approved: EXECUTING."""
        return executing_case(self.app, plan_of(list(steps), rollback, verify))

    def step(self, label: str, exit_code: int = 0) -> dict[str, Any]:
        return script_step(self.script, label, self.counter, exit_code)


def world_of(engine: Engine, tmp_path: Path, **settings: Any) -> Iterator[World]:
    script = counting_script(tmp_path)
    app = make_app(engine, api_token=None, script_allowlist=[str(script)], **settings)
    clock = Clock()
    app.cases.clock = clock
    with TestClient(create_api(app), base_url="http://localhost",
                    raise_server_exceptions=False) as client:
        yield World(app, client, clock, script, tmp_path / "runs.txt")
    app.close()


@pytest.fixture
def world(engine: Engine, tmp_path: Path) -> Iterator[World]:
    """The API with the gatekeeper approving noop-only plans by itself."""
    yield from world_of(engine, tmp_path, auto_approve="noop_only")


@pytest.fixture
def strict(engine: Engine, tmp_path: Path) -> Iterator[World]:
    """The API with automatic approval off: people approve every plan."""
    yield from world_of(engine, tmp_path, auto_approve="off")


# -- the seed's session, in process ----------------------------------------------------------


def test_the_seeds_walkthrough_closes_the_case(world):
    case_id = data(world.post("/case/create", {"title": "p95 spike", "tenant": "t-001"}),
                   201)["case_id"]
    moved = world.client.patch(f"/case/{case_id}/transition",
                               json={"event": "start_analysis", "actor": "analyst@svc"},
                               headers={"Idempotency-Key": "a1"})
    assert data(moved)["status"] == "ANALYZING"

    proposed = data(world.post("/plan/generate", {"case_id": case_id, "template": "noop"}))
    assert proposed["status"] == "WAIT_GATE"

    gate = data(world.stage("/gate/eval", case_id))
    assert gate["status"] == "EXECUTING"
    assert gate["approval"]["approvers"] == ["gatekeeper"]  # the policy's, not the caller's

    executed = data(world.stage("/adapter/exec", case_id))
    assert executed["status"] == "VERIFYING"
    assert [(s["action"], s["ok"]) for s in executed["ran"]] == [("noop", True)]
    assert executed["moved"]["event"] == "exec_done"

    waiting = world.stage("/verify/run", case_id)
    pending = data(waiting, 202)
    reading = pending["verification"]
    assert (pending["status"], pending["version"]) == ("VERIFYING", executed["version"])
    assert (reading["reading"], reading["state"], reading["event"]) == (1, "pending", None)
    since = datetime.fromisoformat(reading["since"])
    assert datetime.fromisoformat(reading["window_ends_at"]) == since + timedelta(seconds=60)
    assert datetime.fromisoformat(reading["deadline"]) > since + timedelta(seconds=60)
    assert "for 60s after the change" in reading["waiting_for"]

    world.clock.now = datetime.fromisoformat(reading["window_ends_at"]) + timedelta(seconds=1)
    closed = data(world.stage("/verify/run", case_id))
    assert closed["status"] == "CLOSED"
    assert (closed["verification"]["reading"], closed["verification"]["event"]) == (
        2, "verify_pass")
    assert world.events(case_id) == [
        "case_opened", "start_analysis", "analysis_done", "plan_ready", "gate_approved",
        "step_result", "exec_done", "verify_reading", "verify_result", "verify_pass"]


def test_generate_right_after_start_analysis_concludes_the_analysis_then_proposes(world):
    case_id = data(world.post("/case/create", {"title": "p95 spike"}), 201)["case_id"]
    assert world.client.patch(f"/case/{case_id}/transition", json={"event": "start_analysis"},
                              headers={"Idempotency-Key": new_key()}).status_code == 200
    key = new_key()
    first = world.post("/plan/generate", {"case_id": case_id, "template": "noop"}, key)
    case = data(first)
    assert (case["status"], case["version"]) == ("WAIT_GATE", 3)
    concluded, proposed = world.timeline(case_id)[-2:]
    assert (concluded["event"], proposed["event"]) == ("analysis_done", "plan_ready")
    assert concluded["actor"] == proposed["actor"] == "anonymous"
    assert "POST /plan/generate" in concluded["reason"]

    before = rows(world.app.engine, case_timeline)
    again = world.post("/plan/generate", {"case_id": case_id, "template": "noop"}, key)
    assert (again.status_code, again.content) == (200, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    assert rows(world.app.engine, case_timeline) == before


# -- POST /gate/eval ----------------------------------------------------------------------


def test_gate_eval_approves_only_what_the_policy_lets_approve_itself(world):
    case_id = data(world.post("/case/create", {"title": "rollout"}), 201)["case_id"]
    for event in ("start_analysis", "analysis_done"):
        world.client.patch(f"/case/{case_id}/transition", json={"event": event},
                           headers={"Idempotency-Key": new_key()})
    proposed = data(world.post("/plan/generate", {"case_id": case_id,
                                                  "template": "k8s.rollout.canary"}))

    answer = data(world.stage("/gate/eval", case_id))

    assert (answer["status"], answer["version"]) == ("WAIT_GATE", proposed["version"])
    approval = answer["approval"]
    assert (approval["state"], approval["needs"], approval["approvers"]) == ("pending", 1, [])
    assert approval["requester"] == "anonymous"
    assert approval["eligible"] == ", ".join(sorted(APPROVERS))
    assert "noop-only" in approval["automatic"]
    assert approval["use"] == f"POST /case/{case_id}/approve"
    reached = datetime.fromisoformat(answer["updated_at"])
    ttl = timedelta(seconds=world.app.settings.approval_ttl_s)
    assert datetime.fromisoformat(approval["expires_at"]) == reached + ttl
    [note] = [row for row in world.timeline(case_id)
              if row["event"] == "awaiting_approval"]
    assert note["reason"] == approval["waiting"]
    assert note["actor"] == "anonymous"


def test_gate_eval_never_counts_as_the_callers_approval(strict, engine):
    operator = bearer(engine, "svc-ci", None, "operator")
    lead = bearer(engine)  # an approver who is a person
    created = strict.client.post("/case/create", json={"title": "noop please"},
                                 headers={"Idempotency-Key": new_key(), **operator})
    case_id = data(created, 201)["case_id"]
    for event in ("start_analysis", "analysis_done"):
        strict.client.patch(f"/case/{case_id}/transition", json={"event": event},
                            headers={"Idempotency-Key": new_key(), **operator})
    strict.client.post("/plan/generate", json={"case_id": case_id, "template": "noop"},
                       headers={"Idempotency-Key": new_key(), **operator})

    answer = strict.client.post("/gate/eval", json={"case_id": case_id},
                                headers={"Idempotency-Key": new_key(), **lead})

    gate = data(answer)
    assert gate["status"] == "WAIT_GATE"
    assert (gate["approval"]["approvers"], gate["approval"]["needs"]) == ([], 1)
    assert gate["approval"]["automatic"] == "automatic approval is off"
    assert "plan_approval" not in strict.events(case_id)


def test_gate_eval_repeated_notes_the_wait_once(strict):
    case_id = data(strict.post("/case/create", {"title": "x"}), 201)["case_id"]
    strict.client.patch(f"/case/{case_id}/transition", json={"event": "start_analysis"},
                        headers={"Idempotency-Key": new_key()})
    strict.post("/plan/generate", {"case_id": case_id, "template": "noop"})
    key = new_key()
    first = strict.stage("/gate/eval", case_id, key)
    same_key = strict.stage("/gate/eval", case_id, key)
    new_key_answer = strict.stage("/gate/eval", case_id)

    assert (same_key.content, same_key.headers["idempotent-replayed"]) == (first.content, "true")
    assert data(new_key_answer)["approval"] == data(first)["approval"]
    assert strict.events(case_id).count("awaiting_approval") == 1


# -- POST /adapter/exec -------------------------------------------------------------------


def test_exec_runs_one_step_per_request_then_moves_to_verifying(world):
    case_id = world.executing(world.step("first"), world.step("second"))
    version = world.case(case_id)["version"]
    key = new_key()

    first = world.stage("/adapter/exec", case_id, key)
    one = data(first)
    assert (one["status"], one["version"], one["moved"]) == ("EXECUTING", version, None)
    assert [(s["index"], s["ok"]) for s in one["ran"]] == [(0, True)]
    assert one["steps"] == {"total": 2, "succeeded": 1}
    assert runs(world.counter) == ["first"]

    again = world.stage("/adapter/exec", case_id, key)
    assert (again.content, again.headers["idempotent-replayed"]) == (first.content, "true")
    assert runs(world.counter) == ["first"]

    two = data(world.stage("/adapter/exec", case_id))
    assert (two["status"], two["moved"]["event"]) == ("VERIFYING", "exec_done")
    assert [s["index"] for s in two["ran"]] == [1]
    assert runs(world.counter) == ["first", "second"]
    [done] = [row for row in world.timeline(case_id)
              if row["event"] == "exec_done"]
    assert (done["actor"], done["meta"]["principal"]) == ("anonymous", "anonymous")

    assert_error(world.stage("/adapter/exec", case_id), 409, "illegal_transition")
    assert runs(world.counter) == ["first", "second"]


class CrashAfterTheStep(StepRunner):
    """The process dies once after a step ran through the gateway, before its note."""

    crashed = False

    def _note(self, *args: Any, **kwargs: Any) -> None:
        if not self.crashed:
            self.crashed = True
            raise RuntimeError("killed between the step and its note")
        super()._note(*args, **kwargs)


def test_a_new_key_after_a_crash_replays_the_step_instead_of_running_it_again(world):
    case_id = world.executing(world.step("once"))
    loop = Consumers(world.app)
    loop.executor.steps = CrashAfterTheStep(
        world.app.gateway, world.app.cases, loop.executor.steps.adapters, lease_s=30)
    world.client.app.state.walkthrough = loop

    crashed = world.stage("/adapter/exec", case_id)
    assert crashed.status_code == 500
    assert runs(world.counter) == ["once"]
    assert world.case(case_id)["status"] == "EXECUTING"

    retried = data(world.stage("/adapter/exec", case_id))  # another key: the step replays

    assert retried["status"] == "VERIFYING"
    assert [(s["index"], s["ok"]) for s in retried["ran"]] == [(0, True)]
    assert runs(world.counter) == ["once"]


def test_a_failing_step_rolls_back_and_parks_as_the_executor_does(world):
    case_id = world.executing(world.step("boom", exit_code=3),
                              rollback=world.step("undo"))
    answer = data(world.stage("/adapter/exec", case_id))
    assert answer["status"] == "PARKED"
    assert [(s["phase"], s["ok"]) for s in answer["ran"]] == [("step", False),
                                                                ("rollback", True)]
    assert answer["moved"]["event"] == "exec_failed"
    assert "rolled back" in answer["moved"]["reason"]
    assert runs(world.counter) == ["boom", "undo"]


@pytest.mark.parametrize("body", [
    {"adapter": "script", "script": "echo ok"},  # the seed's
    {"script": "echo ok"},
    {"adapter": "script"},
    {"params": {"argv": ["/bin/sh", "-c", "id"]}},
    {"action": "noop", "command": "rm -rf /"},
])
def test_a_body_naming_something_to_run_is_422_and_nothing_runs(world, body):
    case_id = world.executing(world.step("never"))
    before = (rows(world.app.engine, case_timeline), rows(world.app.engine, outbox))
    error = assert_error(world.stage("/adapter/exec", case_id, **body), 422, "off_plan")
    assert "runs only the approved plan's next step" in error["message"]
    assert runs(world.counter) == []
    assert world.case(case_id)["status"] == "EXECUTING"
    assert (rows(world.app.engine, case_timeline), rows(world.app.engine, outbox)) == before


def test_naming_another_action_than_the_next_step_is_422_and_nothing_runs(world):
    case_id = world.executing(world.step("never"))
    error = assert_error(world.stage("/adapter/exec", case_id, action="k8s.rollout"), 422,
                         "off_plan")
    assert error["details"] == {"action": "k8s.rollout", "next_step": "script.exec"}
    assert runs(world.counter) == []
    named = data(world.stage("/adapter/exec", case_id, action="script.exec"))
    assert named["status"] == "VERIFYING"
    assert runs(world.counter) == ["never"]


# -- POST /verify/run ---------------------------------------------------------------------


def verifying(world: World, verify: dict[str, Any]) -> Any:
    case_id = world.executing(NOOP_STEP, verify=verify)
    assert data(world.stage("/adapter/exec", case_id))["status"] == "VERIFYING"
    return case_id


def test_verify_parks_the_case_once_the_deadline_passes(world):
    case_id = verifying(world, {"metric": "error_rate", "below": 0.0001, "timeout_s": 30})
    first = data(world.stage("/verify/run", case_id), 202)["verification"]
    assert (first["state"], first["event"]) == ("pending", None)
    assert first["window_ends_at"] == first["since"]  # no window: judged on each reading

    world.clock.now = datetime.fromisoformat(first["deadline"]) + timedelta(seconds=1)
    parked = data(world.stage("/verify/run", case_id))
    assert parked["status"] == "PARKED"
    assert parked["verification"]["event"] == "verify_failed"
    assert "deadline" in parked["verification"]["reason"]


def test_verify_replays_the_same_key_and_reads_again_under_a_new_one(world):
    case_id = verifying(world, WINDOW)
    key = new_key()
    first = world.stage("/verify/run", case_id, key)
    world.clock.now += timedelta(seconds=5)
    again = world.stage("/verify/run", case_id, key)
    assert (again.status_code, again.content) == (202, first.content)
    assert again.headers["idempotent-replayed"] == "true"

    second = data(world.stage("/verify/run", case_id), 202)["verification"]
    assert second["reading"] == 2
    assert world.events(case_id).count("verify_reading") == 2


def test_verify_of_a_plan_without_a_window_closes_at_once(world):
    case_id = verifying(world, {"metric": "error_rate", "below": 0.01})
    closed = data(world.stage("/verify/run", case_id))
    assert (closed["status"], closed["verification"]["state"]) == ("CLOSED", "held")


# -- what every stage refuses -------------------------------------------------------------

STAGES = ["/gate/eval", "/adapter/exec", "/verify/run"]


@pytest.mark.parametrize("path", STAGES)
def test_a_case_at_another_stage_is_409_and_unchanged(world, path):
    case_id = data(world.post("/case/create", {"title": "x"}), 201)["case_id"]
    before = (rows(world.app.engine, case_timeline), rows(world.app.engine, outbox))
    key = new_key()
    refused = world.stage(path, case_id, key)
    error = assert_error(refused, 409, "illegal_transition")
    assert error["details"]["status"] == "NEW"
    assert world.case(case_id)["version"] == 0
    assert (rows(world.app.engine, case_timeline), rows(world.app.engine, outbox)) == before
    again = world.stage(path, case_id, key)
    assert (again.status_code, again.content) == (409, refused.content)


@pytest.mark.parametrize("path", STAGES)
def test_an_unknown_case_is_404(world, path):
    assert_error(world.stage(path, uuid.uuid4()), 404, "not_found")


@pytest.mark.parametrize("path", STAGES)
def test_a_stage_without_an_idempotency_key_is_400_and_does_nothing(world, path):
    case_id = world.executing(world.step("never"))
    response = world.client.post(path, json={"case_id": str(case_id)})
    error = assert_error(response, 400, "bad_request")
    assert "Idempotency-Key" in error["message"]
    assert runs(world.counter) == []
    assert world.case(case_id)["status"] == "EXECUTING"


@pytest.mark.parametrize("path", STAGES)
def test_a_key_used_for_another_stage_request_is_422(world, path):
    key = new_key()
    assert world.stage("/adapter/exec", world.executing(NOOP_STEP), key).status_code == 200
    another_case = world.executing(NOOP_STEP)
    assert_error(world.stage(path, another_case, key), 422, "idempotency_key_reused")
    assert world.case(another_case)["status"] == "EXECUTING"


@pytest.mark.parametrize("path", STAGES)
def test_a_reader_may_not_run_a_stage(world, engine, path):
    reader = bearer(engine, "dash", None, "reader")
    case_id = world.executing(world.step("never"))
    response = world.client.post(path, json={"case_id": str(case_id)},
                                 headers={"Idempotency-Key": new_key(), **reader})
    assert_error(response, 403, "forbidden")
    assert runs(world.counter) == []


def test_openapi_documents_the_stages(world):
    spec = world.client.get("/openapi.json").json()
    for path in STAGES:
        operation = spec["paths"][path]["post"]
        assert {"200", "400", "404", "409", "422"} <= set(operation["responses"])
        assert "Idempotency-Key" in {param["name"] for param in operation["parameters"]}
    assert "202" in spec["paths"]["/verify/run"]["post"]["responses"]
    exec_body = spec["components"]["schemas"]["ExecBody"]
    assert set(exec_body["properties"]) == {"case_id", "action"}
    assert exec_body["additionalProperties"] is False


def test_the_plan_hash_names_the_plan_that_ran(world):
    plan = plan_of([NOOP_STEP])
    case_id = executing_case(world.app, plan)
    assert data(world.stage("/adapter/exec", case_id))["plan_hash"] == plan_hash(plan)

