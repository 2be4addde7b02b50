"""The ChangePlan contract: the schema file, the plan guard's problems, the one parsed reading."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.domain.plans import (
    ROLLBACK_RETRY,
    ROLLBACK_TIMEOUT_S,
    UNSTATED_RISK,
    StepAction,
    parse_plan,
    parsed_or_none,
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


def test_schema_is_draft_2020_12_with_the_seed_actions_http_request_mcp_call_and_remedies():
    schema = plan_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    actions = schema["$defs"]["action"]["enum"]
    assert set(actions) == {a.value for a in StepAction}
    assert {"k8s.rollout", "script.exec", "gateway.flip", "noop", "http.request",
            "mcp.call", "k8s.scale", "k8s.configmap", "flag.set"} == set(actions)


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
        ({**VALID, "steps": [{**VALID["steps"][0], "timeout_s": 86401}]}, "timeout_s"),
        ({**VALID, "title": "wipe\x00it"}, "plan.title: contains NUL"),
        ({**VALID, "title": "\ud800"}, "plan.title: is not valid Unicode"),
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


def test_the_parsed_plan_is_what_the_json_says_with_defaults_filled_in():
    parsed = parse_plan(VALID)
    assert (parsed.title, parsed.risk, parsed.digest) == (VALID["title"], 0.4, plan_hash(VALID))
    [step] = parsed.steps
    assert (step.action, dict(step.params), step.timeout_s, step.retry) == (
        StepAction.K8S_ROLLOUT, {"deployment": "checkout"}, 60, 1)
    [undo] = parsed.rollback
    assert (undo.action, dict(undo.params), undo.timeout_s, undo.retry) == (
        StepAction.K8S_ROLLOUT, {"to": "v42"}, ROLLBACK_TIMEOUT_S, ROLLBACK_RETRY)
    assert dict(parsed.verify) == VALID["verify"]
    assert parsed.actions == {StepAction.K8S_ROLLOUT} and not parsed.noop_only


def test_the_parsed_plan_is_a_copy_the_json_cannot_change_afterwards():
    plan = copy.deepcopy(VALID)
    parsed = parse_plan(plan)
    plan["steps"][0]["params"]["deployment"] = "everything"
    assert parsed.steps[0].params["deployment"] == "checkout"


def test_a_plan_without_a_risk_score_reads_as_the_riskiest():
    assert parse_plan(without(["risk_score"])).risk == UNSTATED_RISK == 1.0


# -- rollback: exactly two shapes ------------------------------------------------------------

UNDO = {"action": "noop", "params": {"note": "undo"}}


def test_a_rollback_of_one_step_object_is_one_step_with_defaults():
    [step] = parse_plan({**VALID, "rollback": UNDO}).rollback
    assert (step.action, step.timeout_s, step.retry) == ("noop", ROLLBACK_TIMEOUT_S,
                                                         ROLLBACK_RETRY)


def test_a_rollback_list_keeps_its_order_and_own_limits():
    block = {"steps": [UNDO, {**UNDO, "timeout_s": 30, "retry": 2}]}
    steps = parse_plan({**VALID, "rollback": block}).rollback
    assert [(s.timeout_s, s.retry) for s in steps] == [(ROLLBACK_TIMEOUT_S, ROLLBACK_RETRY),
                                                        (30, 2)]


def test_an_empty_step_list_says_there_is_nothing_to_undo():
    assert parse_plan({**VALID, "rollback": {"steps": []}}).rollback == ()


@pytest.mark.parametrize(("block", "says"), [
    ({"steps": [UNDO], "action": "script.exec", "params": {"argv": ["rm", "-rf", "/"]}},
     'plan.rollback: has both "action" and "steps"'),
    ({}, 'plan.rollback: give one step'),
    ({"undo": "everything"}, 'plan.rollback: give one step'),
    ([UNDO], "plan.rollback: list is not an object"),
    ("noop", "plan.rollback: str is not an object"),
    ({**UNDO, "then": {"action": "script.exec"}}, "'then' was unexpected"),
    ({"steps": [UNDO], "extra": 1}, "'extra' was unexpected"),
    ({"action": "rm -rf"}, "plan.rollback.action: 'rm -rf' is not one of"),
    ({"steps": [UNDO, {**UNDO, "retry": 9}]}, "plan.rollback.steps[1].retry"),
    ({"steps": ["noop"]}, "plan.rollback.steps[0]: 'noop' is not of type 'object'"),
    ({"steps": [{"steps": [UNDO]}]}, "plan.rollback.steps[0]"),
])
def test_a_rollback_of_any_other_shape_is_refused_by_name(block, says):
    problems = plan_problems({**VALID, "rollback": block})
    assert any(says in p for p in problems), problems
    assert parsed_or_none({**VALID, "rollback": block}) is None


def test_a_step_with_keys_the_schema_does_not_name_is_refused():
    step = {**VALID["steps"][0], "rollback": {"action": "script.exec"}}
    problems = plan_problems({**VALID, "steps": [step]})
    assert any("plan.steps[0]" in p and "'rollback' was unexpected" in p for p in problems)


# -- numbers JSON does not have ---------------------------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", [["risk_score"], ["steps", 0, "params", "weight"],
                                   ["verify", "below"], ["rollback", "params", "x"]])
def test_nan_and_infinity_are_refused_wherever_they_stand(value, where):
    plan = copy.deepcopy(VALID)
    target = plan
    for part in where[:-1]:
        target = target[part]
    target[where[-1]] = value
    problems = plan_problems(plan)
    path = "plan" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where)
    assert any(p.startswith(f"{path}: ") and "NaN and Infinity are refused" in p
               for p in problems), problems


def test_a_nan_risk_from_json_text_is_refused_although_every_bound_is_false_for_it():
    plan = json.loads(json.dumps(VALID).replace('"risk_score": 0.4', '"risk_score": NaN'))
    assert math.isnan(plan["risk_score"])
    assert plan_problems(plan) == [
        "plan.risk_score: nan is not a number JSON allows (NaN and Infinity are refused)"]


def test_a_deeply_nested_param_is_walked_without_exhausting_the_stack():
    deep: object = math.nan
    for _ in range(5000):
        deep = [deep]
    plan = {**VALID, "steps": [{**VALID["steps"][0], "params": {"deep": deep}}]}
    assert any("NaN" in p for p in plan_problems(plan))


# -- http.request header values ----------------------------------------------------------------


def http_plan(value: object) -> dict:
    step = {"action": "http.request", "timeout_s": 10, "retry": 0,
            "params": {"method": "POST", "url": "http://127.0.0.1:9/x",
                       "headers": {"X-Reason": value}}}
    return {**VALID, "steps": [step]}


@pytest.mark.parametrize("value", ["a\u0085b", "a\r\nX-Evil: 1", "tab\x0bvt", "é", " lead",
                                   "trail\t", "nul\x00", 7, "x" * 4097])
def test_a_header_value_that_is_not_visible_ascii_is_refused_at_the_guard(value):
    problems = plan_problems(http_plan(value))
    assert any(p.startswith("plan.steps[0].params.headers.X-Reason: ") for p in problems), \
        problems


@pytest.mark.parametrize("value", ["", "token abc", "a\tb", "x" * 4096, "!~"])
def test_visible_ascii_with_inner_spaces_and_tabs_is_a_header_value(value):
    assert plan_problems(http_plan(value)) == []


def test_a_rollback_header_is_checked_too():
    step = http_plan("bad\u0085")["steps"][0]
    problems = plan_problems({**VALID, "rollback": {"steps": [step]}})
    assert any(p.startswith("plan.rollback.steps[0].params.headers.X-Reason") for p in problems)


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=5))
def test_plan_hash_ignores_key_order(params):
    a = {**VALID, "steps": [{**VALID["steps"][0], "params": params}]}
    b = {**VALID, "steps": [{**VALID["steps"][0], "params": dict(reversed(list(params.items())))}]}
    assert plan_hash(a) == plan_hash(b)


def test_the_plan_hash_is_the_same_for_numbers_as_a_store_gives_them_back():
    stored = {**VALID, "steps": [{**VALID["steps"][0], "params": {"n": 10**16, "z": 0.0}}]}
    sent = {**VALID, "steps": [{**VALID["steps"][0], "params": {"n": 1e16, "z": -0.0}}]}
    assert plan_hash(sent) == plan_hash(stored)
    assert plan_hash({**VALID, "risk_score": 0.5}) != plan_hash({**VALID, "risk_score": 0.4})


def test_plan_hash_changes_with_the_plan():
    assert plan_hash(VALID) != plan_hash({**VALID, "title": "something else"})


def test_the_model_sees_the_same_contract_with_references_that_resolve():
    from jsonschema import Draft202012Validator

    from agent.tool_specs import tool_specs

    [spec] = [t["function"]["parameters"] for t in tool_specs()
              if t["function"]["name"] == "propose_plan"]
    validator = Draft202012Validator(spec)
    assert list(validator.iter_errors({"case_id": "c", "plan": VALID})) == []
    both = {**VALID, "rollback": {"action": "noop", "steps": []}}
    assert list(validator.iter_errors({"case_id": "c", "plan": both}))
