"""The outbox payloads the typed builders write: the same JSON keys, in the same order, as the
wire has always carried."""

import json
from datetime import UTC, datetime
from uuid import UUID

from core.domain.fsm import Accepted, CaseEvent, CaseStatus
from core.domain.messages import (
    MoveContext,
    Topic,
    messages_for,
    note_message,
    opened_message,
    scheduled_message,
)

CASE = UUID(int=1)


def test_a_move_writes_the_transition_payload_to_every_topic():
    move = Accepted(CaseStatus.PLANNING, CaseEvent.PLAN_READY, CaseStatus.WAIT_GATE)
    ctx = MoveContext(CASE, 4, "alice", "c-1", plan_hash="abc", reason="why")
    messages = messages_for(move, ctx)
    assert [m.topic for m in messages] == [Topic.CASE_TRANSITION, Topic.PLAN_PROPOSED,
                                           Topic.GATE_EVAL]
    for message in messages:
        assert message.key == str(CASE)
        assert json.dumps(message.payload) == json.dumps({
            "case_id": str(CASE), "version": 4, "event": "plan_ready", "from": "PLANNING",
            "to": "WAIT_GATE", "actor": "alice", "correlation_id": "c-1", "plan_hash": "abc",
            "reason": "why"})
    assert messages[0].payload is not messages[1].payload  # each row its own dict


def test_a_move_without_plan_or_reason_leaves_them_out():
    move = Accepted(CaseStatus.NEW, CaseEvent.START_ANALYSIS, CaseStatus.ANALYZING)
    [fact, command] = messages_for(move, MoveContext(CASE, 1, "intake", None))
    assert command.topic == Topic.ANALYSIS_RUN
    assert list(fact.payload) == ["case_id", "version", "event", "from", "to", "actor",
                                  "correlation_id"]


def test_the_opened_fact():
    message = opened_message(CASE, "5xx", "SEV2", "alice", "c-1")
    assert (message.topic, message.key) == (Topic.CASE_OPENED, str(CASE))
    assert json.dumps(message.payload) == json.dumps({
        "case_id": str(CASE), "version": 0, "title": "5xx", "severity": "SEV2",
        "actor": "alice", "correlation_id": "c-1"})


def test_a_note_event_carries_its_facts_after_the_common_keys():
    note = {"case_id": str(CASE), "version": 3, "event": "plan_approval", "actor": "bob",
            "reason": "1 more", "correlation_id": "c-2"}
    message = note_message(Topic.APPROVAL_RECORDED, note,
                           {"plan_hash": "abc", "approvers": ["bob"], "needs": 1})
    assert message.key == str(CASE) and message.deliver_after is None
    assert json.dumps(message.payload) == json.dumps({
        **note, "plan_hash": "abc", "approvers": ["bob"], "needs": 1})


def test_a_scheduled_command_names_the_case_the_note_event_and_its_facts():
    note = {"case_id": str(CASE), "version": 5, "event": "awaiting_approval",
            "actor": "gatekeeper", "reason": "waiting", "correlation_id": "c-3"}
    due = datetime(2026, 1, 1, tzinfo=UTC)
    message = scheduled_message(Topic.GATE_EXPIRE, note, "awaiting_approval",
                                {"plan_hash": "abc", "expires_at": due.isoformat()}, due)
    assert (message.topic, message.deliver_after) == (Topic.GATE_EXPIRE, due)
    assert json.dumps(message.payload) == json.dumps({
        "case_id": str(CASE), "version": 5, "event": "awaiting_approval",
        "correlation_id": "c-3", "plan_hash": "abc", "expires_at": due.isoformat()})
