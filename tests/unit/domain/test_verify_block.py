"""The ``verify`` block: the JSON Schema and the pydantic shapes accept the same blocks, the guard's
problems name the key at fault, and a block's window and deadline after the change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from core.domain.plan_templates import load_template, template_names
from core.domain.plans import plan_problems, plan_schema
from core.domain.verify import (
    DEFAULT_GRACE_S,
    MetricCheck,
    ProbeCheck,
    parse_verify,
    verify_problems,
)
from core.errors import InvalidPlan

PLAN = {"title": "Restart checkout", "rollback": {"steps": []},
        "steps": [{"action": "noop", "params": {}, "timeout_s": 10, "retry": 0}]}
NEVER_IN_TIME = "could never hold for its window before the deadline"

ACCEPTED: list[Any] = [
    {"metric": "error_rate", "below": 0.01},
    {"metric": "replicas", "above": 2},
    {"metric": "latency_p95_ms", "above": 1, "below": 500, "for_s": 300},
    {"metric": "latency_p95_ms", "below": 500, "for_s": 300, "timeout_s": 900},
    {"metric": "latency_p95_ms", "below": 500, "for_s": 300.0},  # JSON's 300.0 is an integer
    {"metric": "x", "below": -1.5e3, "timeout_s": 86400},
    {"probe": {"url": "http://127.0.0.1:8081/healthz"}},
    {"probe": {"url": "http://127.0.0.1:8081/healthz", "expect_status": [200, 204]},
     "timeout_s": 60},
    {"checks": [{"metric": "http_5xx_ratio", "below": 0.01, "for_s": 180},
                {"probe": {"url": "http://127.0.0.1:8081/healthz"}}], "timeout_s": 600},
    {"checks": [{"metric": "error_rate", "below": 0.01}]},
]

REFUSED: list[tuple[Any, str]] = [
    (None, "plan.verify: the verify block must be an object, not NoneType"),
    ("error_rate < 0.01", "the verify block must be an object, not str"),
    ({}, "expected 'metric', 'probe' or 'checks'"),
    ({"metric": "error_rate"}, "plan.verify: a metric check needs 'below' or 'above'"),
    ({"metric": "error_rate", "bellow": 0.01},
     "plan.verify.bellow: unknown key; expected metric, below, above, for_s, timeout_s"),
    ({"metric": "error_rate", "below": "0.01"}, "plan.verify.below: Input should be a valid"),
    ({"metric": "error_rate", "below": True}, "plan.verify.below"),
    ({"metric": "error_rate", "below": None}, "plan.verify.below: null is not a value"),
    ({"metric": "", "below": 1}, "plan.verify.metric"),
    ({"metric": "x", "below": 1, "for_s": 0}, "plan.verify.for_s"),
    ({"metric": "x", "below": 1, "for_s": 30.5}, "plan.verify.for_s"),
    ({"metric": "x", "below": 1, "for_s": "300"}, "plan.verify.for_s"),
    ({"metric": "x", "below": 1, "for_s": 86401}, "plan.verify.for_s"),
    ({"metric": "x", "below": 1, "timeout_s": 0}, "plan.verify.timeout_s"),
    ({"probe": "healthz", "expect_status": 200}, "plan.verify.probe: should be an object"),
    ({"probe": {"url": "http://h/", "expect_status": "200"}}, "plan.verify.probe.expect_status"),
    ({"probe": {"url": "http://h/", "expect_status": [99]}}, "plan.verify.probe.expect_status"),
    ({"probe": {"url": "http://h/", "method": "POST"}},
     "plan.verify.probe.method: unknown key; expected url, expect_status"),
    ({"probe": {"url": "http://h/"}, "for_s": 60}, "plan.verify.for_s: unknown key"),
    ({"checks": []}, "plan.verify.checks"),
    ({"checks": [{"checks": [{"metric": "x", "below": 1}]}]},
     "plan.verify.checks[0]: expected 'metric' or 'probe'"),
    ({"checks": ["error_rate"]}, "plan.verify.checks[0]: a check must be an object"),
    ({"checks": [{"metric": "x", "below": 1, "timeout_s": 60}]},
     "plan.verify.checks[0].timeout_s: unknown key"),  # the deadline is the block's
    ({"checks": [{"metric": "x", "below": 1}], "metric": "y"}, "plan.verify.metric: unknown key"),
    ({"metric": "x", "below": 1, "probe": {"url": "http://h/"}}, "plan.verify.probe"),
]


def schema_accepts(block: Any) -> bool:
    return Draft202012Validator(plan_schema()).is_valid({**PLAN, "verify": block})


def shapes_accept(block: Any) -> bool:
    """The pydantic shapes' verdict alone (the deadline rule is one a schema cannot say)."""
    return all(NEVER_IN_TIME in problem for problem in verify_problems(block))


@pytest.mark.parametrize("block", ACCEPTED)
def test_an_accepted_block_passes_schema_shapes_and_guard(block):
    assert schema_accepts(block) and shapes_accept(block)
    assert plan_problems({**PLAN, "verify": block}) == []
    assert parse_verify(block).checks


@pytest.mark.parametrize(("block", "problem"), REFUSED)
def test_a_block_that_cannot_be_judged_is_refused_naming_the_problem(block, problem):
    assert not schema_accepts(block) and not shapes_accept(block)
    problems = plan_problems({**PLAN, "verify": block})
    assert any(problem in line for line in problems), problems
    with pytest.raises(InvalidPlan):
        parse_verify(block)


def test_a_window_longer_than_its_deadline_is_refused_though_its_shape_is_fine():
    block = {"checks": [{"metric": "x", "below": 1, "for_s": 300},
                        {"metric": "y", "below": 1, "for_s": 60}], "timeout_s": 120}
    assert schema_accepts(block)  # the schema cannot compare two keys
    assert plan_problems({**PLAN, "verify": block}) == [
        "plan.verify.checks[0].for_s: 300s is longer than the block's timeout_s 120s: it could "
        "never hold for its window before the deadline"]
    assert verify_problems({"metric": "x", "below": 1, "for_s": 120, "timeout_s": 120}) == []


@pytest.mark.parametrize("name", template_names())
def test_the_template_plans_verify_blocks_can_be_judged(name):
    block = load_template(name)["verify"]
    assert verify_problems(block) == [] and schema_accepts(block)
    assert parse_verify(block).window_s > 0


# -- the same random blocks to both -------------------------------------------------------------

SECONDS = st.sampled_from([1, 60, 300, 300.0, 86400, 0, 30.5, 86401, -60, "60", True, None])
NUMBERS = st.sampled_from([0.01, 1, -3, 1e3, 0, True, "1", None, [1]])
PROBES = st.sampled_from([
    {"url": "http://h/healthz"}, {"url": "http://h/", "expect_status": [200, 503]},
    {"url": ""}, {"url": "u", "expect_status": []}, {"url": "u", "expect_status": [99]},
    {"url": "u", "expect_status": [200.0]}, {"url": "u", "expect_status": None},
    {"url": "u", "method": "GET"}, {"expect_status": [200]}, "healthz", None, []])


VALUES = st.one_of(SECONDS, NUMBERS, PROBES, st.sampled_from(["error_rate", "", 5]))
KEYS = st.sampled_from(["metric", "below", "above", "for_s", "timeout_s", "probe", "bellow"])


def _mutated(block: dict[str, Any], changes: list[tuple[str, Any]],
             dropped: list[str]) -> dict[str, Any]:
    return {**{k: v for k, v in block.items() if k not in dropped}, **dict(changes)}


def _near(*valid: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A valid check or block with up to two keys set to any value and maybe one dropped."""
    return st.builds(_mutated, st.sampled_from(valid),
                     st.lists(st.tuples(KEYS, VALUES), max_size=2),
                     st.lists(KEYS, max_size=1))


CHECK = _near({"metric": "error_rate", "below": 0.01, "for_s": 60}, {"metric": "x", "above": 1},
              {"probe": {"url": "http://h/healthz"}})
CHECKS = st.builds(lambda checks, extra: {"checks": checks, **extra},
                   st.one_of(st.lists(CHECK, max_size=3),
                             st.sampled_from([["error_rate"], {}, None])),
                   st.dictionaries(st.sampled_from(["timeout_s", "metric"]), VALUES, max_size=1))
BLOCKS = st.one_of(CHECK, CHECKS, st.sampled_from([None, "x", [], 1]))


@settings(max_examples=1000, deadline=None)
@given(BLOCKS)
def test_the_schema_and_the_shapes_agree_on_any_block(block):
    assert schema_accepts(block) == shapes_accept(block), verify_problems(block)


# -- window and deadline --------------------------------------------------------------------------

CHANGE = datetime(2026, 11, 24, 14, 0, tzinfo=UTC)


def test_the_window_is_the_longest_for_s_and_the_deadline_defaults_past_it():
    block = parse_verify({"checks": [{"metric": "a", "below": 1, "for_s": 120},
                                     {"metric": "b", "below": 1, "for_s": 300},
                                     {"probe": {"url": "http://h/"}}]})
    assert block.window_s == 300
    assert block.deadline(CHANGE) == CHANGE + timedelta(seconds=300 + DEFAULT_GRACE_S)
    assert isinstance(block.checks[2], ProbeCheck)


def test_a_timeout_sets_the_deadline_the_cap_bounds_it_and_a_scale_shrinks_both():
    block = parse_verify({"metric": "a", "below": 1, "for_s": 300, "timeout_s": 1200})
    assert isinstance(block.checks[0], MetricCheck) and block.timeout_s == 1200
    assert block.deadline(CHANGE) == CHANGE + timedelta(seconds=1200)
    assert block.deadline(CHANGE, max_wait_s=600) == CHANGE + timedelta(seconds=600)
    assert block.deadline(CHANGE, scale=0.01) == CHANGE + timedelta(seconds=12)
    assert parse_verify({"metric": "a", "below": 1}).wait_s() == DEFAULT_GRACE_S


def test_a_check_says_what_must_hold():
    block = parse_verify({"checks": [
        {"metric": "checkout_p95", "below": 1, "for_s": 300},
        {"metric": "replicas", "above": 2, "below": 10},
        {"probe": {"url": "http://h/healthz", "expect_status": [200, 204]}}]})
    assert [check.condition() for check in block.checks] == [
        "checkout_p95 below 1 for 300s after the change",
        "replicas below 10 and above 2",
        "probe http://h/healthz answering 200 or 204"]


def test_the_agents_propose_plan_tool_shows_the_model_the_verify_shapes():
    """The tool spec embeds the plan schema; its references must resolve there too, or the
    model would see the verify block only as a dangling ``$ref``."""
    from agent.tool_specs import tool_specs

    [spec] = [s for s in tool_specs() if s["function"]["name"] == "propose_plan"]
    parameters = spec["function"]["parameters"]
    Draft202012Validator.check_schema(parameters)
    validator = Draft202012Validator(parameters)
    case_id = "0b5f4b2e-0000-4000-8000-000000000000"
    assert validator.is_valid({"case_id": case_id, "plan": {**PLAN, "verify": ACCEPTED[3]}})
    assert not validator.is_valid({"case_id": case_id,
                                   "plan": {**PLAN, "verify": {"metric": "x", "bellow": 1}}})
