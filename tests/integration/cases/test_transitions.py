"""The transition contract on real databases (SQLite and PostgreSQL): every FSM cell, the
status codes, idempotent replays byte for byte, fences, guards."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from core.api.statuses import reply_status
from core.db.tables import case_timeline, outbox, plan_approved, plan_proposed
from core.domain.commands import Fence, OpenCase
from core.domain.fsm import TRANSITIONS, CaseEvent, CaseStatus
from core.domain.messages import Topic
from tests.support.cases import (
    APPROVER,
    PATH_TO,
    PLAN,
    PLAN_HASH,
    case_in,
    command,
    key,
    open_case,
    snapshot,
)

E, S = CaseEvent, CaseStatus


def test_open_case_starts_new_at_version_zero_with_timeline_and_outbox(service, engine):
    case_id = open_case(service)
    case = service.get_case(case_id)
    assert (case["status"], case["version"]) == ("NEW", 0)
    assert [row["event"] for row in service.timeline(case_id)] == ["case_opened"]
    with engine.connect() as conn:
        topics = conn.execute(select(outbox.c.topic)).scalars().all()
    assert topics == [Topic.CASE_OPENED]


def hours_apart() -> Callable[[], datetime]:
    """A clock two hours later at each reading: a plan at the gate has always outlived the
    approval TTL (an hour) by the next write, so gate_expired's guard admits it."""
    start, readings = datetime.now(UTC), itertools.count()
    return lambda: start + timedelta(hours=2 * next(readings))


@pytest.mark.parametrize("status", list(S))
def test_every_cell_of_the_fsm(service, engine, status):
    """From each status: legal events succeed, illegal ones are 409 and change nothing."""
    service.clock = hours_apart()
    for event in E:
        case_id = case_in(service, status)
        before = snapshot(engine, case_id)
        reply = service.transition(command(case_id, event), key())
        target = TRANSITIONS.get((status, event))
        if target is None:
            assert reply_status(reply) == 409, (status, event, reply.body)
            assert json.loads(reply.body)["error"]["code"] == "illegal_transition"
            after = snapshot(engine, case_id)
            assert after["case"] == before["case"]
            for table in ("case_timeline", "outbox", "plan_proposed", "plan_approved"):
                assert after[table] == before[table], table
        else:
            assert reply_status(reply) == 200, (status, event, reply.body)
            case = service.get_case(case_id)
            assert (case["status"], case["version"]) == (target, len(PATH_TO[status]) + 1)


def test_a_move_writes_case_timeline_and_outbox_together(service, engine):
    case_id = case_in(service, S.PLANNING)
    reply = service.transition(command(case_id, E.PLAN_READY, correlation_id="corr-1"), key())
    assert reply_status(reply) == 200
    assert reply.data()["plan_hash"] == PLAN_HASH
    last = service.timeline(case_id)[-1]
    assert last["event"] == "plan_ready" and last["correlation_id"] == "corr-1"
    assert last["meta"] == {"outcome": "accepted", "from": "PLANNING", "to": "WAIT_GATE",
                            "version": 3, "plan_hash": PLAN_HASH}
    with engine.connect() as conn:
        rows = conn.execute(select(outbox).where(outbox.c.payload["version"].as_integer() == 3)
                            .order_by(outbox.c.id)).mappings().all()
        plans = conn.execute(select(plan_proposed)).mappings().all()
    assert [r["topic"] for r in rows] == [Topic.CASE_TRANSITION, Topic.PLAN_PROPOSED,
                                          Topic.GATE_EVAL]
    assert {r["key"] for r in rows} == {str(case_id)}
    assert all(r["payload"]["correlation_id"] == "corr-1" for r in rows)
    assert len(plans) == 1 and plans[0]["plan"] == PLAN and plans[0]["plan_hash"] == PLAN_HASH


def test_approval_is_bound_to_the_plan_hash(service, engine):
    case_id = case_in(service, S.WAIT_GATE)
    before = snapshot(engine, case_id)
    wrong = service.transition(command(case_id, E.GATE_APPROVED, plan_hash="0" * 64), key())
    assert reply_status(wrong) == 422
    assert json.loads(wrong.body)["error"]["code"] == "stale_plan"
    after = snapshot(engine, case_id)
    assert after["case"] == before["case"]
    assert after["case_timeline"] == before["case_timeline"] + 1
    assert (after["outbox"], after["plan_approved"]) == (before["outbox"], before["plan_approved"])
    right = service.transition(command(case_id, E.GATE_APPROVED), key())
    assert reply_status(right) == 200
    with engine.connect() as conn:
        approval = conn.execute(select(plan_approved)).mappings().one()
    assert approval["plan_hash"] == PLAN_HASH
    assert approval["decision"]["approver"] == APPROVER


@pytest.mark.parametrize(
    "plan",
    [None, {"title": "no steps", "steps": [], "rollback": {}, "verify": {}},
     {"title": "no verify", "steps": PLAN["steps"], "rollback": {}},
     {**PLAN, "steps": [{"action": "noop", "timeout_s": 30}]},
     {**PLAN, "verify": {"metric": "error_rate", "below": 0.01, "bellow": 0.02}},  # a typo
     {**PLAN, "verify": {"checks": [{"metric": "error_rate", "below": 0.01, "for_s": 600}],
                         "timeout_s": 300}}],  # a window that outlasts its deadline
)
def test_failed_guard_is_422_with_one_timeline_row_and_nothing_else(service, engine, plan):
    case_id = case_in(service, S.PLANNING)
    before = snapshot(engine, case_id)
    reply = service.transition(command(case_id, E.PLAN_READY, plan=plan), key())
    assert reply_status(reply) == 422
    error = json.loads(reply.body)["error"]
    assert error["code"] == "guard_failed" and error["details"]["problems"]
    after = snapshot(engine, case_id)
    assert after["case"] == before["case"]
    assert after["case_timeline"] == before["case_timeline"] + 1
    for table in ("outbox", "plan_proposed", "plan_approved"):
        assert after[table] == before[table], table
    refusal = service.timeline(case_id)[-1]
    assert refusal["meta"]["outcome"] == "refused" and refusal["meta"]["to"] is None


def test_version_mismatch_is_412_and_changes_nothing(service, engine):
    case_id = case_in(service, S.ANALYZING)
    before = snapshot(engine, case_id)
    reply = service.transition(command(case_id, E.ANALYSIS_DONE, expected_version=0), key())
    assert reply_status(reply) == 412
    assert json.loads(reply.body)["error"]["code"] == "version_conflict"
    after = snapshot(engine, case_id)
    assert {k: v for k, v in after.items() if k != "idempotency"} == {
        k: v for k, v in before.items() if k != "idempotency"}
    ok = service.transition(command(case_id, E.ANALYSIS_DONE, expected_version=1), key())
    assert reply_status(ok) == 200


def test_unknown_case_is_404_and_not_stored(service, engine):
    import uuid

    before = snapshot(engine)
    reply = service.transition(command(uuid.uuid4(), E.START_ANALYSIS), key())
    assert reply_status(reply) == 404
    assert snapshot(engine) == before


@pytest.mark.parametrize("event", [E.START_ANALYSIS, E.EXEC_DONE, E.PLAN_READY])
def test_replay_returns_the_first_reply_byte_for_byte_and_writes_nothing(service, engine, event):
    case_id = case_in(service, S.NEW)
    k = key()
    plan = {"title": "incomplete"} if event is E.PLAN_READY else None
    cmd = command(case_id, event, **({"plan": plan} if plan else {}))
    first = service.transition(cmd, k)
    before = snapshot(engine, case_id)
    again = service.transition(cmd, k)
    assert (reply_status(again), again.body) == (reply_status(first), first.body)
    assert again.replayed and not first.replayed
    assert snapshot(engine, case_id) == before


def test_same_key_different_request_is_422_and_writes_nothing(service, engine):
    case_id = case_in(service, S.NEW)
    k = key()
    assert reply_status(service.transition(command(case_id, E.START_ANALYSIS), k)) == 200
    before = snapshot(engine, case_id)
    reuse = service.transition(command(case_id, E.START_ANALYSIS, reason="different"), k)
    assert reply_status(reuse) == 422
    assert json.loads(reuse.body)["error"]["code"] == "idempotency_key_reused"
    assert snapshot(engine, case_id) == before


def test_a_retry_with_a_new_correlation_id_is_still_a_replay(service):
    case_id = case_in(service, S.NEW)
    k = key()
    first = service.transition(command(case_id, E.START_ANALYSIS, correlation_id="a"), k)
    again = service.transition(command(case_id, E.START_ANALYSIS, correlation_id="b"), k)
    assert again.replayed and again.body == first.body


def test_open_case_is_idempotent(service, engine):
    k = key()
    cmd = OpenCase(title="disk full on db-1", actor="pager")
    first = service.open_case(cmd, k)
    before = snapshot(engine)
    again = service.open_case(cmd, k)
    assert (reply_status(again), again.body) == (reply_status(first), first.body) and again.replayed
    assert snapshot(engine) == before
    assert reply_status(service.open_case(OpenCase(title="other", actor="pager"), k)) == 422


def test_stale_fence_is_refused_before_any_row_is_written(service, engine):
    case_id = case_in(service, S.NEW)
    old = service.issue_fence("case-thread-1")
    new = service.issue_fence("case-thread-1")
    assert new.token == old.token + 1
    before = snapshot(engine, case_id)
    stale = service.transition(command(case_id, E.START_ANALYSIS, fence=old), key())
    assert reply_status(stale) == 412
    assert json.loads(stale.body)["error"]["code"] == "stale_fence"
    assert snapshot(engine, case_id) == before
    unknown = service.transition(
        command(case_id, E.START_ANALYSIS, fence=Fence("never-issued", 99)), key())
    assert reply_status(unknown) == 412
    assert reply_status(service.transition(command(case_id, E.START_ANALYSIS, fence=new),
                                           key())) == 200


def test_fence_tokens_are_per_session_and_monotonic(service):
    tokens = [service.issue_fence("s-a").token for _ in range(5)]
    assert tokens == [1, 2, 3, 4, 5]
    assert service.issue_fence("s-b").token == 1


def test_resume_from_parked_asks_for_a_new_plan_and_reuses_the_last_one(service, engine):
    case_id = case_in(service, S.PARKED)  # its plan was rejected: it comes back on a retry only
    assert reply_status(service.transition(command(case_id, E.RESUME, reason="retry"),
                                           key())) == 200
    again = service.transition(command(case_id, E.PLAN_READY, plan=None), key())
    assert reply_status(again) == 200 and again.data()["plan_hash"] == PLAN_HASH
    with engine.connect() as conn:
        topics = conn.execute(select(outbox.c.topic).order_by(outbox.c.id)).scalars().all()
        events = conn.execute(select(case_timeline.c.event)).scalars().all()
    assert topics.count(Topic.PLAN_GENERATE) == 2  # analysis_done and resume
    assert events.count("plan_ready") == 2


def test_a_note_records_a_fact_without_moving_the_case(service, engine):
    from core.domain.commands import NoteCase

    case_id = case_in(service, S.EXECUTING)
    before = snapshot(engine, case_id)
    cmd = NoteCase(case_id, "step_result", "executor", reason="step 1 ok",
                   meta={"step": 0, "ok": True}, topic="evt.exec.step_result.v1")
    k = key()
    reply = service.note(cmd, k)
    assert reply_status(reply) == 200
    after = snapshot(engine, case_id)
    assert after["case"] == before["case"]
    assert (after["case_timeline"], after["outbox"]) == (before["case_timeline"] + 1,
                                                         before["outbox"] + 1)
    row = service.timeline(case_id)[-1]
    assert row["event"] == "step_result"
    assert row["meta"]["outcome"] == "note"
    assert row["meta"]["context"] == {"step": 0, "ok": True}
    again = service.note(cmd, k)
    assert again.replayed
    assert snapshot(engine, case_id) == {**after}
    illegal = service.note(NoteCase(case_id, "exec_done", "executor"), key())
    assert reply_status(illegal) == 422


def test_a_plan_with_nul_in_a_key_is_refused_and_the_refusal_is_recorded(service, engine):
    """A hostile plan whose keys and strings hold NUL: one 422 naming each place, recorded on
    both databases (PostgreSQL refuses NUL in JSONB: the refusal's own words must not carry it)."""
    case_id = case_in(service, S.PLANNING)
    plan = {**PLAN, "title": "bad \x00 title",
            "rollback": [{"action": "noop", "params": {"x\x00": "a\x00"}, "timeout_s": 10}]}
    reply = service.transition(command(case_id, E.PLAN_READY, plan=plan), key())
    assert reply_status(reply) == 422
    problems = json.loads(reply.body)["error"]["details"]["problems"]
    assert "plan.rollback[0].params['x\\x00']: contains NUL (\\u0000), which cannot be stored" \
        in problems
    assert "plan.title: contains NUL (\\u0000), which cannot be stored" in problems
    with engine.connect() as conn:
        last = conn.execute(select(case_timeline.c.event, case_timeline.c.meta)
                            .where(case_timeline.c.case_id == case_id)
                            .order_by(case_timeline.c.id.desc())).first()
    assert last is not None and last.event == "plan_ready"
    assert last.meta["outcome"] == "refused" and last.meta["problems"] == problems
