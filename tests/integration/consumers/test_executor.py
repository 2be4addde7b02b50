"""The executor consumer on real SQLite and PostgreSQL: steps through the gateway with real
adapters (a counting script, a local HTTP server), retries, rollback, parking, redelivery."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from core.consumers.executor import Executor
from core.db.tables import outbox
from core.domain.messages import Topic
from core.messaging.consumer import ConsumerRunner, Delivery
from core.messaging.envelope import Envelope
from tests.support.cases import command, key
from tests.support.local_http import Reply, Seen, local_server
from tests.support.plan_runs import (
    E,
    S,
    approve,
    counting_script,
    envelope_of,
    executing_case,
    fresh_copy,
    make_app,
    notes,
    plan_of,
    runs,
    script_step,
    status,
)
from tests.support.servers import REDIS_URL


class Crash(Exception):
    """The executor's process dies after its steps ran, before the case moved."""


class CrashingExecutor(Executor):
    def _finish(self, *args: Any, **kwargs: Any) -> None:
        raise Crash("killed before the final transition")


def runner(app, consumer=None) -> ConsumerRunner:
    return ConsumerRunner(app.engine, consumer or Executor(app), sleep=lambda _s: None)


def step_events(engine, case_id) -> int:
    query = select(func.count()).select_from(outbox).where(
        outbox.c.topic == "evt.exec.step_result.v1", outbox.c.key == str(case_id))
    with engine.connect() as conn:
        return conn.execute(query).scalar_one()


def test_all_steps_ok_moves_the_case_to_verifying(engine, tmp_path):
    script, counter = counting_script(tmp_path), tmp_path / "runs.txt"
    with local_server({"/restart": Reply(202, b"accepted")}) as server:
        app = make_app(engine, script_allowlist=[str(script)],
                       http_allowlist=[server.url("/")])
        plan = plan_of([
            {"action": "noop", "params": {"note": "drain first"}, "timeout_s": 10, "retry": 0},
            script_step(script, "restart", counter),
            {"action": "http.request", "timeout_s": 10, "retry": 0,
             "params": {"method": "POST", "url": server.url("/restart"), "json": {"pods": 3}}},
        ])
        case_id = executing_case(app, plan)
        assert runner(app).deliver(envelope_of(engine, case_id, Topic.EXEC_RUN)) == "done"

    assert status(app, case_id) == S.VERIFYING
    assert runs(counter) == ["restart"]
    assert [s.path for s in server.seen] == ["/restart"]
    results = notes(app, case_id, "step_result")
    assert [(n["context"]["step"], n["context"]["attempt"], n["context"]["ok"])
            for n in results] == [(0, 1, True), (1, 1, True), (2, 1, True)]
    assert [n["context"]["action"] for n in results] == ["noop", "script.exec", "http.request"]
    assert all(n["context"]["duration_s"] >= 0 for n in results)
    assert "202" in results[2]["reason"]
    assert step_events(engine, case_id) == 3
    done = [row for row in app.cases.timeline(case_id) if row["event"] == "exec_done"]
    assert len(done) == 1 and done[0]["meta"]["to"] == S.VERIFYING
    # exec_done emits the verifier's command
    assert envelope_of(engine, case_id, Topic.VERIFY_RUN).payload["version"] == \
        app.cases.get_case(case_id)["version"]


def test_a_failing_step_runs_retry_plus_one_times_then_rolls_back_and_parks(engine, tmp_path):
    script = counting_script(tmp_path)
    steps, undo = tmp_path / "steps.txt", tmp_path / "undo.txt"
    app = make_app(engine, script_allowlist=[str(script)])
    plan = plan_of([script_step(script, "first", steps),
                    script_step(script, "flaky", steps, exit_code=3, retry=2),
                    script_step(script, "never", steps)],
                   rollback={"action": "script.exec", "params": {
                       "argv": [str(script), "undo", str(undo)]}})
    case_id = executing_case(app, plan)
    envelope = envelope_of(engine, case_id, Topic.EXEC_RUN)
    assert runner(app).deliver(envelope) == "done"

    assert runs(steps) == ["first", "flaky", "flaky", "flaky"]  # retry 2 = 3 attempts
    assert runs(undo) == ["undo"]
    assert status(app, case_id) == S.PARKED
    results = notes(app, case_id, "step_result")
    assert [(n["context"]["step"], n["context"]["attempt"], n["context"]["ok"])
            for n in results] == [(0, 1, True), (1, 1, False), (1, 2, False), (1, 3, False)]
    assert results[1]["context"]["detail"]["exit_code"] == 3
    rollback = notes(app, case_id, "rollback_result")
    assert [(n["context"]["step"], n["context"]["ok"]) for n in rollback] == [(0, True)]
    assert step_events(engine, case_id) == 5  # 4 attempts and the rollback step
    failed = [row for row in app.cases.timeline(case_id) if row["event"] == "exec_failed"]
    assert len(failed) == 1
    assert "step 2 (script.exec) failed after 3 attempts" in failed[0]["reason"]
    assert "rolled back" in failed[0]["reason"]
    assert failed[0]["meta"]["context"]["failed_step"] == 1
    # the order on the timeline: attempts, then the rollback, then the park
    events = [row["event"] for row in app.cases.timeline(case_id)]
    assert events[-6:] == ["step_result"] * 4 + ["rollback_result", "exec_failed"]

    # the same message again, and the same command under a fresh message id: nothing runs
    timeline_before = len(app.cases.timeline(case_id))
    assert runner(app).deliver(envelope) == "duplicate"
    assert runner(app).deliver(fresh_copy(envelope)) == "done"
    assert runs(steps) == ["first", "flaky", "flaky", "flaky"]
    assert runs(undo) == ["undo"]
    assert len(app.cases.timeline(case_id)) == timeline_before

    # resume brings the parked case back to planning (and asks for a new plan)
    reply = app.cases.transition(command(case_id, E.RESUME), key())
    assert reply.ok, reply.body
    assert status(app, case_id) == S.PLANNING
    assert envelope_of(engine, case_id, Topic.PLAN_GENERATE).payload["to"] == S.PLANNING


def test_after_resume_and_a_new_approval_the_same_plan_runs_again(engine, tmp_path):
    script, counter = counting_script(tmp_path), tmp_path / "runs.txt"
    app = make_app(engine, script_allowlist=[str(script)])
    plan = plan_of([script_step(script, "restart", counter, exit_code=1)])
    case_id = executing_case(app, plan)
    assert runner(app).deliver(envelope_of(engine, case_id, Topic.EXEC_RUN)) == "done"
    assert status(app, case_id) == S.PARKED
    # a person asks for the same plan again (without it the guard refuses a plan that failed)
    assert app.cases.transition(command(case_id, E.RESUME, reason="retry"), key()).ok
    approve(app, case_id, plan)  # the identical plan, approved again: a new case version

    assert runner(app).deliver(envelope_of(engine, case_id, Topic.EXEC_RUN)) == "done"
    assert runs(counter) == ["restart", "restart"]  # ran for real, not a replay of the first
    assert status(app, case_id) == S.PARKED


def test_a_crash_before_the_final_transition_replays_every_step_on_redelivery(engine,
                                                                             tmp_path):
    script = counting_script(tmp_path)
    steps, undo = tmp_path / "steps.txt", tmp_path / "undo.txt"
    app = make_app(engine, script_allowlist=[str(script)])
    plan = plan_of([script_step(script, "flaky", steps, exit_code=1, retry=1)],
                   rollback={"action": "script.exec", "params": {
                       "argv": [str(script), "undo", str(undo)]}})
    case_id = executing_case(app, plan)
    envelope = envelope_of(engine, case_id, Topic.EXEC_RUN)
    with pytest.raises(Crash):
        CrashingExecutor(app).handle(Delivery("executor", envelope))
    assert status(app, case_id) == S.EXECUTING
    assert runs(steps) == ["flaky", "flaky"] and runs(undo) == ["undo"]
    timeline_before = len(app.cases.timeline(case_id))

    for delivered in (envelope, fresh_copy(envelope)):  # the message again, and a new id
        assert runner(app).deliver(delivered) == "done"
    assert runs(steps) == ["flaky", "flaky"] and runs(undo) == ["undo"]
    assert status(app, case_id) == S.PARKED
    # the notes replayed too: only the final transition is new
    assert len(app.cases.timeline(case_id)) == timeline_before + 1
    assert len(notes(app, case_id, "step_result")) == 2


def test_a_refused_step_parks_the_case_without_retries(engine, tmp_path):
    script, counter = counting_script(tmp_path), tmp_path / "runs.txt"
    plan = plan_of([script_step(script, "first", counter),
                    {"action": "script.exec", "timeout_s": 10, "retry": 2,
                     "params": {"argv": ["/bin/echo", "not on the list"]}}])
    # Approved while /bin/echo was allowed (its dry run passed); the allow-list was narrowed
    # before the run: the executor refuses the step, whatever the gate saw.
    case_id = executing_case(make_app(engine, script_allowlist=[str(script), "/bin/echo"]), plan)
    app = make_app(engine, script_allowlist=[str(script)])
    assert runner(app).deliver(envelope_of(engine, case_id, Topic.EXEC_RUN)) == "done"

    assert status(app, case_id) == S.PARKED
    results = notes(app, case_id, "step_result")
    assert [(n["context"]["step"], n["context"]["attempt"]) for n in results] == [(0, 1), (1, 1)]
    assert results[1]["context"]["refused"] == "step_refused"
    failed = next(row for row in app.cases.timeline(case_id) if row["event"] == "exec_failed")
    assert "step 2 (script.exec) refused" in failed["reason"]
    assert "not on the script allow-list" in failed["reason"]
    assert failed["meta"]["context"]["refused"] == "step_refused"
    assert len(notes(app, case_id, "rollback_result")) == 1  # the earlier step is undone
    assert runs(counter) == ["first"]


def test_http_idempotency_key_reaches_the_server_once_per_attempt(engine, tmp_path):
    answers = iter([500, 503, 200])

    def flaky(_seen: Seen) -> Reply:
        return Reply(next(answers))

    with local_server({"/orders": flaky}) as server:
        app = make_app(engine, http_allowlist=[server.url("/")])
        plan = plan_of([{"action": "http.request", "timeout_s": 10, "retry": 2,
                         "params": {"method": "POST", "url": server.url("/orders"),
                                    "json": {"sku": "A1"}}}])
        case_id = executing_case(app, plan)
        envelope = envelope_of(engine, case_id, Topic.EXEC_RUN)
        with pytest.raises(Crash):
            CrashingExecutor(app).handle(Delivery("executor", envelope))
        for delivered in (envelope, envelope, fresh_copy(envelope), fresh_copy(envelope, 7)):
            runner(app).deliver(delivered)

    keys = server.keys()
    assert len(keys) == 3 and set(keys.values()) == {1}  # three attempts, each key once
    assert all(k.startswith("opsgate-step-") for k in keys)
    assert status(app, case_id) == S.VERIFYING
    sent = [n["context"]["detail"]["idempotency_key"] for n in notes(app, case_id, "step_result")]
    assert sent == [s.headers["idempotency-key"] for s in server.seen]


def test_a_stale_command_does_nothing(engine, tmp_path):
    script, counter = counting_script(tmp_path), tmp_path / "runs.txt"
    app = make_app(engine, script_allowlist=[str(script)])
    case_id = executing_case(app, plan_of([script_step(script, "restart", counter)]))
    current = envelope_of(engine, case_id, Topic.EXEC_RUN)
    older = Envelope(current.message_id + 1, current.topic, current.key,
                     {**current.payload, "version": current.payload["version"] - 1})
    timeline_before = len(app.cases.timeline(case_id))

    assert runner(app).deliver(older) == "done"
    assert runs(counter) == []
    assert len(app.cases.timeline(case_id)) == timeline_before
    assert status(app, case_id) == S.EXECUTING


def test_redelivery_with_the_redis_gateway_runs_nothing_again(pg_engine, redis_client,
                                                               redis_prefix, tmp_path):
    script = counting_script(tmp_path)
    counter, undo = tmp_path / "runs.txt", tmp_path / "undo.txt"
    app = make_app(pg_engine, redis_url=REDIS_URL, gateway_key_prefix=redis_prefix,
                   script_allowlist=[str(script)])
    assert app.gateway.claims is not None
    plan = plan_of([script_step(script, "restart", counter, exit_code=1, retry=1)],
                   rollback={"steps": [{"action": "script.exec", "params": {
                       "argv": [str(script), "undo", str(undo)]}}]})
    case_id = executing_case(app, plan)
    envelope = envelope_of(pg_engine, case_id, Topic.EXEC_RUN)
    with pytest.raises(Crash):
        CrashingExecutor(app).handle(Delivery("executor", envelope))
    assert list(redis_client.scan_iter(match=f"{redis_prefix}*"))  # Redis holds the results

    assert runner(app).deliver(envelope) == "done"  # replayed from Redis
    assert runs(counter) == ["restart", "restart"] and runs(undo) == ["undo"]
    assert status(app, case_id) == S.PARKED
    app.gateway.close()


def test_a_lost_redis_record_does_not_rerun_a_step(pg_engine, redis_client, redis_prefix,
                                                    tmp_path):
    script, counter = counting_script(tmp_path), tmp_path / "runs.txt"
    app = make_app(pg_engine, redis_url=REDIS_URL, gateway_key_prefix=redis_prefix,
                   script_allowlist=[str(script)])
    case_id = executing_case(app, plan_of([script_step(script, "restart", counter)]))
    envelope = envelope_of(pg_engine, case_id, Topic.EXEC_RUN)
    with pytest.raises(Crash):
        CrashingExecutor(app).handle(Delivery("executor", envelope))
    redis_client.delete(*redis_client.scan_iter(match=f"{redis_prefix}*"))  # evicted

    assert runner(app).deliver(fresh_copy(envelope)) == "done"  # the ledger replays
    assert runs(counter) == ["restart"]
    assert status(app, case_id) == S.VERIFYING
    app.gateway.close()
