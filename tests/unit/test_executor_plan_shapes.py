"""Pure parts of the executor: which rollback shapes it accepts, and the lease of a step."""

from __future__ import annotations

import pytest

from core.consumers.executor import ROLLBACK_RETRY, ROLLBACK_TIMEOUT_S, rollback_steps
from core.consumers.steps import step_lease_s

UNDO = {"action": "noop", "params": {"note": "undo"}}


def test_one_step_object_is_one_rollback_step_with_defaults():
    steps, problem = rollback_steps(UNDO)
    assert problem is None
    [step] = steps
    assert (step.phase, step.index, step.action) == ("rollback", 0, "noop")
    assert (step.timeout_s, step.retry) == (ROLLBACK_TIMEOUT_S, ROLLBACK_RETRY)
    assert step.params == {"note": "undo"}


@pytest.mark.parametrize("block", [{"steps": [UNDO, {**UNDO, "timeout_s": 30, "retry": 2}]},
                                   [UNDO, {**UNDO, "timeout_s": 30, "retry": 2}]])
def test_a_list_of_steps_keeps_its_order_and_own_limits(block):
    steps, problem = rollback_steps(block)
    assert problem is None
    assert [(s.index, s.timeout_s, s.retry) for s in steps] == [
        (0, ROLLBACK_TIMEOUT_S, ROLLBACK_RETRY), (1, 30, 2)]


def test_an_empty_rollback_has_nothing_to_undo():
    assert rollback_steps({}) == ([], None)


@pytest.mark.parametrize(("block", "says"), [
    ({"undo": "everything"}, "not a step or a list of steps"),
    ({"action": "rm -rf"}, "rollback step 1 is invalid: action"),
    ({"steps": [UNDO, {**UNDO, "retry": 9}]}, "rollback step 2 is invalid: retry"),
    ({"steps": ["noop"]}, "rollback step 1 is not an object"),
    (None, "not a step or a list of steps"),
])
def test_a_rollback_it_cannot_read_is_a_problem_not_an_exception(block, says):
    steps, problem = rollback_steps(block)
    assert steps == []
    assert problem is not None and says in problem


def test_a_step_lease_covers_twice_its_timeout_and_never_less_than_configured():
    assert step_lease_s(10, 30.0) == 30.0
    assert step_lease_s(100, 30.0) == 200.0
    assert step_lease_s(10, 1.0) == 25.0  # the margin, for short steps
