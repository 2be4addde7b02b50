"""The FSM table of DESIGN.md, cell by cell, and the purity of decide()."""

from __future__ import annotations

import itertools

import pytest

from core.domain.fsm import (
    TRANSITIONS,
    Accepted,
    CaseEvent,
    CaseStatus,
    allowed_events,
    decide,
    fold,
)
from core.domain.refusal import Refused

S, E = CaseStatus, CaseEvent

DESIGN_TABLE = {
    (S.NEW, E.START_ANALYSIS): S.ANALYZING,
    (S.ANALYZING, E.ANALYSIS_DONE): S.PLANNING,
    (S.PLANNING, E.PLAN_READY): S.WAIT_GATE,
    (S.WAIT_GATE, E.GATE_APPROVED): S.EXECUTING,
    (S.WAIT_GATE, E.GATE_REJECTED): S.PARKED,
    (S.WAIT_GATE, E.GATE_EXPIRED): S.PARKED,  # the gate's expiry (docs/approvals.md)
    (S.EXECUTING, E.EXEC_DONE): S.VERIFYING,
    (S.EXECUTING, E.EXEC_FAILED): S.PARKED,
    (S.VERIFYING, E.VERIFY_PASS): S.CLOSED,
    (S.VERIFYING, E.VERIFY_FAILED): S.PARKED,
    (S.PARKED, E.RESUME): S.PLANNING,
    (S.PARKED, E.FIX): S.PLANNING,
}


def test_transition_table_is_exactly_the_design():
    assert TRANSITIONS == DESIGN_TABLE


@pytest.mark.parametrize(("status", "event"), list(itertools.product(S, E)))
def test_decide_is_total_and_matches_the_table(status, event):
    decision = decide(status, event)
    if (status, event) in DESIGN_TABLE:
        assert decision == Accepted(status, event, DESIGN_TABLE[(status, event)])
    else:
        assert isinstance(decision, Refused)
        assert decision.source is status and decision.event is event
        assert str(event) in decision.reason and str(status) in decision.reason


def test_refusal_names_what_is_allowed():
    decision = decide(S.WAIT_GATE, E.EXEC_DONE)
    assert isinstance(decision, Refused)
    assert decision.allowed == (E.GATE_APPROVED, E.GATE_REJECTED, E.GATE_EXPIRED)
    assert "gate_approved, gate_rejected, gate_expired" in decision.reason


def test_closed_is_terminal():
    assert allowed_events(S.CLOSED) == ()
    decision = decide(S.CLOSED, E.RESUME)
    assert isinstance(decision, Refused)
    assert "closed" in decision.reason


def test_fold_walks_the_happy_path_and_rejects_illegal_histories():
    happy = [E.START_ANALYSIS, E.ANALYSIS_DONE, E.PLAN_READY, E.GATE_APPROVED, E.EXEC_DONE,
             E.VERIFY_PASS]
    assert fold(happy) is S.CLOSED
    assert fold([]) is S.NEW
    with pytest.raises(ValueError, match="not allowed"):
        fold([E.START_ANALYSIS, E.EXEC_DONE])
