"""The shipped default Cedar policy decides exactly as the hand-written rules did (issue 27): on
generated plans, approver lists, user groups, thresholds and approval sequences, every answer
of ``ApprovalPolicy`` (Cedar) equals the old rules' (``tests/support/legacy_policy.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.domain.plans import plan_hash
from core.domain.policy import AUTO_APPROVER, Approval, ApprovalPolicy
from tests.support.legacy_policy import LegacyPolicy
from tests.support.plan_shapes import plan_shapes

PROPERTY = settings(max_examples=400, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

PEOPLE = ("U1", "U2", "U3", "U4", "S1", "S2", AUTO_APPROVER)
REQUESTERS = ("U1", "U2", "U4", "agent")
EDGES = (0.0, 0.0001, 0.2999, 0.29, 0.3, 0.3001, 0.5, 0.69995, 0.6999, 0.7, 0.70001, 0.9999,
         1.0)

PARAMS: dict[str, dict[str, Any]] = {
    "noop": {},
    "script.exec": {"argv": ["restart-service", "--graceful"]},
    "k8s.rollout": {"namespace": "payments", "deployment": "payments-api",
                    "container": "api", "image": "registry.example.com/payments:v2.3.9"},
    "http.request": {"method": "POST", "url": "http://127.0.0.1:8081/flags/checkout"},
}

risks = st.one_of(st.none(), st.sampled_from(EDGES),
                  st.floats(min_value=0, max_value=1, allow_nan=False))
grid = st.integers(0, 10_000).map(lambda n: n / 10_000) | st.sampled_from((0.3, 0.7, 0.0, 1.0))
actions = st.sampled_from(tuple(PARAMS))


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    """A valid plan with any mix of actions and a risk at, near or between the bounds (the
    shapes of ``plan_shapes`` add the plans a model gets wrong)."""
    def step(action: str) -> dict[str, Any]:
        return {"action": action, "params": PARAMS[action], "timeout_s": 30, "retry": 0}

    body: dict[str, Any] = {
        "title": "restore checkout",
        "steps": [step(a) for a in draw(st.lists(actions, min_size=1, max_size=3))],
        "rollback": {"steps": [step(a) for a in draw(st.lists(actions, max_size=2))]},
        "verify": {"metric": "error_rate", "below": 0.01},
    }
    risk = draw(risks)
    if risk is not None:
        body["risk_score"] = risk
    return body


@st.composite
def worlds(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, set[str]]]:
    """The settings of the gate and who is in which Slack user group."""
    options = {
        "approvers": frozenset(draw(st.sets(st.sampled_from(PEOPLE[:6])))),
        "two_person_risk": draw(grid),
        "auto_approve": draw(st.sampled_from(("off", "noop_only", "low_risk"))),
        "auto_approve_max_risk": draw(grid),
    }
    groups = {group: draw(st.sets(st.sampled_from(("U1", "U2", "U3", "U4"))))
              for group in ("S1", "S2")}
    return options, groups


def both(options: dict[str, Any], groups: dict[str, set[str]]
         ) -> tuple[ApprovalPolicy, LegacyPolicy]:
    def members(group: str) -> set[str]:
        return groups.get(group, set())

    return (ApprovalPolicy(members=members, **options),
            LegacyPolicy(members=members, **options))


def said(verdict: Any) -> tuple[Any, ...]:
    """A verdict as the gate uses it: its kind, who counted, how many more, and why."""
    return (type(verdict).__name__, getattr(verdict, "approvers", None),
            getattr(verdict, "needs", None), verdict.reason)


@PROPERTY
@given(world=worlds(), plan=plans() | plan_shapes(), requester=st.sampled_from(REQUESTERS),
       sequence=st.lists(st.tuples(st.sampled_from(PEOPLE), st.booleans()), max_size=5))
@example(world=({"approvers": frozenset(), "two_person_risk": 0.7, "auto_approve": "off",
                 "auto_approve_max_risk": 0.3}, {}),
         plan={"title": "t", "steps": [], "rollback": [], "verify": {}, "risk_score": 0.7},
         requester="U1", sequence=[("U2", True)])
def test_the_default_policy_judges_every_approval_sequence_as_the_old_rules(
        world, plan, requester, sequence):
    cedar, legacy = both(*world)
    digest = plan_hash(plan)
    approvals = [Approval(person, digest if current else "an older plan")
                 for person, current in sequence]
    assert said(cedar.evaluate(plan, requester, approvals)) == \
        said(legacy.evaluate(plan, requester, approvals))


@PROPERTY
@given(world=worlds(), plan=plans() | plan_shapes(), requester=st.sampled_from(REQUESTERS))
def test_the_default_policy_says_who_may_decide_how_many_and_what_passes_alone_as_before(
        world, plan, requester):
    cedar, legacy = both(*world)
    assert cedar.required(plan) == legacy.required(plan)
    assert cedar.auto_approves(plan) == legacy.auto_approves(plan)
    assert cedar.describe_approvers() == legacy.describe_approvers()
    for person in PEOPLE:
        assert cedar.refusal(person, requester, plan) == legacy.refusal(person, requester, plan)
        assert cedar.may_approve(person) == legacy.may_approve(person)


@pytest.mark.parametrize("name", ["two_person_risk", "auto_approve_max_risk"])
def test_a_threshold_finer_than_cedars_four_places_is_refused(name):
    """Cedar's decimals carry four places: a finer bound could not decide as the old rules
    did (risk 0.70004 against 0.70005), so it is refused rather than rounded."""
    with pytest.raises(ValueError, match="four decimal places"):
        ApprovalPolicy(**{name: 0.70005})
    plan = {"title": "t", "steps": [{"action": "noop", "params": {}, "timeout_s": 30,
                                     "retry": 0}], "rollback": {"action": "noop"},
            "verify": {"metric": "error_rate", "below": 0.01}}
    assert LegacyPolicy(two_person_risk=0.70005).required({**plan, "risk_score": 0.70004}) == 1
    assert ApprovalPolicy(two_person_risk=0.7).required({**plan, "risk_score": 0.70004}) == 2
