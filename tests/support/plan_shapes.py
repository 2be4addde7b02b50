"""Hypothesis strategies for plans of every shape, valid or not (mostly valid, so the policy's
and the parser's refusals are both reached): steps, rollbacks and whole plans."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

ACTIONS = st.sampled_from(["noop", "noop", "noop", "noop", "noop", "script.exec",
                           "k8s.rollout", "gateway.flip", "http.request"])
BAD_ACTIONS = st.one_of(st.sampled_from(["shell.exec", "NOOP", " noop", "", "noop\x00"]),
                        st.text(max_size=8))
NUMBERS = st.one_of(st.integers(-5, 700), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 0.29, 1.0, 10, 60]))
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=8))

JSONISH = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
SCRIPT_PARAMS = st.just({"argv": ["touch", "/tmp/opsgate-red-team"]})
PARAMS = st.one_of(st.just({}), SCRIPT_PARAMS, st.dictionaries(st.text(max_size=6), JSONISH,
                                                             max_size=3))


def mostly(draw: st.DrawFn, good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any],
           odds: int = 8) -> Any:
    """``good``, and one time in ``odds`` ``bad``: shapes stay near what a model writes."""
    return draw(bad) if draw(st.integers(0, odds - 1)) == odds - 1 else draw(good)


@st.composite
def step_shapes(draw: st.DrawFn, rollback: bool = False) -> Any:
    """Mostly a well-formed step (so plans reach the gate), sometimes one gone wrong."""
    step: dict[str, Any] = {"action": mostly(draw, ACTIONS, BAD_ACTIONS)}
    if draw(st.booleans()):
        step["params"] = mostly(draw, PARAMS, JSONISH)
    for name, fine in (("timeout_s", st.integers(10, 600)), ("retry", st.integers(0, 3))):
        if not rollback or draw(st.booleans()):
            step[name] = mostly(draw, fine, st.one_of(NUMBERS, st.text(max_size=3)))
    if draw(st.integers(0, 9)) == 9:  # a key the schema does not name, maybe a smuggled step
        step[draw(st.sampled_from(["steps", "rollback", "then", "ação"]))] = draw(st.one_of(
            st.lists(st.just({"action": "script.exec", "params": {"argv": ["id"]}}),
                     min_size=1, max_size=2), JSONISH))
    if draw(st.integers(0, 19)) == 19:
        return draw(st.one_of(JSONISH, st.just(step["action"])))  # not even an object
    return step


@st.composite
def rollback_shapes(draw: st.DrawFn) -> Any:
    one, many = draw(step_shapes(rollback=True)), draw(st.lists(step_shapes(rollback=True),
                                                                max_size=3))
    shape = mostly(draw, st.sampled_from(["one", "many"]), st.sampled_from(
        ["both", "both", "list", "nested", "empty", "extra", "junk"]), odds=3)
    if shape == "one":
        return one
    if shape == "many":
        return {"steps": many}
    if shape == "both":  # the red team's shape
        return {**(one if isinstance(one, dict) else {}), "steps": many}
    if shape == "list":
        return many
    if shape == "nested":
        return {"steps": [{"steps": many}]}
    if shape == "empty":
        return {}
    if shape == "extra":
        return {"steps": many, draw(st.text(max_size=5)): draw(JSONISH)}
    return draw(JSONISH)


@st.composite
def plan_shapes(draw: st.DrawFn) -> Any:
    plan: dict[str, Any] = {
        "title": draw(st.one_of(st.just("Restart"), st.text(min_size=1, max_size=20))),
        "steps": draw(st.lists(step_shapes(), min_size=1, max_size=3)),
        "rollback": draw(rollback_shapes()),
        "verify": {"metric": "error_rate", "below": 0.01},
    }
    if draw(st.booleans()):
        plan["risk_score"] = mostly(draw, st.floats(0, 1), st.one_of(
            NUMBERS, st.text(max_size=3), st.booleans()), odds=4)
    mutation = draw(st.integers(0, 15))  # 0..11: none
    if mutation == 12:
        del plan[draw(st.sampled_from(["title", "steps", "rollback", "verify"]))]
    elif mutation == 13:
        plan[draw(st.text(max_size=6))] = draw(JSONISH)
    elif mutation == 14:
        plan["steps"] = draw(st.one_of(st.just([]), JSONISH))
    elif mutation == 15:
        plan["verify"] = draw(JSONISH)
    return plan
