"""The ChangePlan contract: the schema file, the plan guard's problems, the pydantic mirror."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from core.domain.plans import (
    ChangePlan,
    StepAction,
    parse_plan,
    plan_hash,
    plan_problems,
    plan_schema,
)
from core.errors import InvalidPlan

VALID = {
    "title": "Roll back checkout to v41",
    "risk_score": 0.4,
    "steps": [{"action": "k8s.rollout", "params": {"deployment": "checkout"}, "timeout_s": 60,
               "retry": 1}],
    "rollback": {"action": "k8s.rollout", "params": {"to": "v42"}},
    "verify": {"metric": "p95_latency_ms", "below": 300},
}


def without(path: list, plan=VALID):
    broken = copy.deepcopy(plan)
    target = broken
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    return broken


def test_schema_is_draft_2020_12_with_the_seed_actions_and_http_request():
    schema = plan_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    actions = schema["$defs"]["step"]["properties"]["action"]["enum"]
    assert set(actions) == {a.value for a in StepAction}
    assert {"k8s.rollout", "script.exec", "gateway.flip", "noop", "http.request"} == set(actions)


def test_valid_plan_has_no_problems():
    assert plan_problems(VALID) == []
    assert parse_plan(VALID).steps[0].action is StepAction.K8S_ROLLOUT


@pytest.mark.parametrize(
    ("broken", "needle"),
    [
        (without(["steps"]), "'steps' is a required property"),
        ({**VALID, "steps": []}, "steps"),
        (without(["steps", 0, "action"]), "'action' is a required property"),
        (without(["steps", 0, "timeout_s"]), "'timeout_s' is a required property"),
        (without(["steps", 0, "retry"]), "'retry' is a required property"),
        (without(["rollback"]), "'rollback' is a required property"),
        (without(["verify"]), "'verify' is a required property"),
        ({**VALID, "risk_score": 1.5}, "risk_score"),
        ({**VALID, "steps": [{**VALID["steps"][0], "action": "rm -rf"}]}, "action"),
        ({**VALID, "steps": [{**VALID["steps"][0], "timeout_s": 5}]}, "timeout_s"),
        ({**VALID, "steps": [{**VALID["steps"][0], "retry": 4}]}, "retry"),
        ("not a plan", "not of type 'object'"),
    ],
)
def test_incomplete_plans_are_rejected_with_a_readable_problem(broken, needle):
    problems = plan_problems(broken)
    assert problems, "the guard must reject this plan"
    assert any(needle in p for p in problems), problems
    with pytest.raises(InvalidPlan) as raised:
        parse_plan(broken)
    assert raised.value.details["problems"] == problems


def test_pydantic_mirror_agrees_with_the_schema_on_the_examples():
    for broken in (without(["steps"]), without(["rollback"]), {**VALID, "risk_score": -0.1}):
        with pytest.raises(ValidationError):
            ChangePlan.model_validate(broken)
    assert ChangePlan.model_validate(VALID).title == VALID["title"]


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=5))
def test_plan_hash_ignores_key_order(params):
    a = {**VALID, "steps": [{**VALID["steps"][0], "params": params}]}
    b = {**VALID, "steps": [{**VALID["steps"][0], "params": dict(reversed(list(params.items())))}]}
    assert plan_hash(a) == plan_hash(b)


def test_plan_hash_changes_with_the_plan():
    assert plan_hash(VALID) != plan_hash({**VALID, "title": "something else"})
