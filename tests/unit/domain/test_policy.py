"""The approval policy, pure: who may approve, how many must, which plans approve themselves."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from core.domain.plans import parse_plan, plan_hash
from core.domain.policy import (
    AUTO_APPROVER,
    NO_APPROVERS,
    Approval,
    ApprovalPolicy,
    Pending,
    Satisfied,
    noop_only,
    plan_risk,
)
from core.domain.refusal import Refused
from core.settings import Settings


def plan(risk: float | None = 0.2, action: str = "script.exec",
         rollback: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "title": "restart checkout", "steps": [{"action": action, "params": {},
                                                "timeout_s": 30, "retry": 0}],
        "rollback": {"action": "noop"} if rollback is None else rollback,
        "verify": {"metric": "error_rate", "below": 0.01},
    }
    if risk is not None:
        body["risk_score"] = risk
    return body


def yes(p: dict[str, Any], *approvers: str) -> list[Approval]:
    return [Approval(a, plan_hash(p)) for a in approvers]


LOW, HIGH = plan(0.2), plan(0.7)
PEOPLE = frozenset({"alice", "bob", "carol"})  # the approvers the tests name


def named(**settings: Any) -> ApprovalPolicy:
    """A policy naming the tests' approvers (an empty list lets nobody approve)."""
    return ApprovalPolicy(approvers=PEOPLE, **settings)


def test_one_approver_who_is_not_the_requester_satisfies_a_low_risk_plan():
    verdict = named().evaluate(LOW, "alice", yes(LOW, "bob"))
    assert verdict == Satisfied(("bob",), "approved by bob")


def test_no_approval_yet_is_pending_one():
    verdict = named().evaluate(LOW, "alice", [])
    assert isinstance(verdict, Pending) and verdict.needs == 1


def test_the_requester_never_approves_their_own_plan():
    verdict = named().evaluate(LOW, "alice", yes(LOW, "alice"))
    assert isinstance(verdict, Refused)
    assert "alice requested this plan" in verdict.reason
    listed = ApprovalPolicy(approvers=frozenset({"alice", "bob"}))
    assert isinstance(listed.evaluate(LOW, "alice", yes(LOW, "alice")), Refused)


def test_an_approver_not_on_the_list_is_refused_and_the_list_is_named():
    policy = ApprovalPolicy(approvers=frozenset({"U1", "U2"}))
    verdict = policy.evaluate(LOW, "alice", yes(LOW, "mallory"))
    assert isinstance(verdict, Refused)
    assert "mallory is not an approver" in verdict.reason and "U1, U2" in verdict.reason
    assert isinstance(policy.evaluate(LOW, "alice", yes(LOW, "U2")), Satisfied)


def test_an_empty_list_lets_nobody_approve_or_reject_and_says_why():
    nobody = ApprovalPolicy()
    assert not nobody.may_approve("anyone")
    assert nobody.describe_approvers() == f"nobody ({NO_APPROVERS})"
    verdict = nobody.evaluate(LOW, "alice", yes(LOW, "bob"))
    assert isinstance(verdict, Refused) and verdict.reason.startswith(NO_APPROVERS)
    assert nobody.refusal("bob", "alice", LOW) == verdict.reason  # a no is refused alike
    assert isinstance(nobody.evaluate(LOW, "alice", []), Pending)  # the plan waits


def test_an_empty_list_never_widens_automatic_approval():
    for mode in ("off", "noop_only", "low_risk"):
        listed = named(auto_approve=mode)
        unnamed = ApprovalPolicy(auto_approve=mode)  # type: ignore[arg-type]
        for p in (LOW, HIGH, plan(0.0, action="noop")):
            assert unnamed.auto_approves(p) == listed.auto_approves(p)
            assert (type(unnamed.evaluate(p, "alice", yes(p, AUTO_APPROVER)))
                    is type(listed.evaluate(p, "alice", yes(p, AUTO_APPROVER))))


def test_group_members_are_approvers_through_the_injected_resolver():
    groups = {"S-oncall": {"U7", "U8"}}
    policy = ApprovalPolicy(approvers=frozenset({"S-oncall"}),
                            members=lambda group: groups.get(group, set()))
    assert policy.may_approve("U7")
    assert not policy.may_approve("U9")
    assert isinstance(policy.evaluate(LOW, "alice", yes(LOW, "U8")), Satisfied)
    without_resolver = ApprovalPolicy(approvers=frozenset({"S-oncall"}))
    assert not without_resolver.may_approve("U7")


@pytest.mark.parametrize("risk", [0.7, 0.9, 1.0])
def test_risk_at_or_above_the_threshold_needs_two_distinct_approvers(risk):
    p = plan(risk)
    policy = named()
    one = policy.evaluate(p, "alice", yes(p, "bob"))
    assert isinstance(one, Pending) and one.needs == 1 and one.approvers == ("bob",)
    assert "two distinct approvers" in one.reason
    assert isinstance(policy.evaluate(p, "alice", yes(p, "bob", "carol")), Satisfied)


def test_the_same_approver_twice_counts_once():
    verdict = named().evaluate(HIGH, "alice", yes(HIGH, "bob", "bob", "bob"))
    assert isinstance(verdict, Pending) and verdict.needs == 1 and verdict.approvers == ("bob",)


def test_just_below_the_threshold_needs_one():
    p = plan(0.69)
    assert isinstance(named().evaluate(p, "alice", yes(p, "bob")), Satisfied)


def test_the_threshold_is_configurable():
    p = plan(0.5)
    strict = named(two_person_risk=0.5)
    assert isinstance(strict.evaluate(p, "alice", yes(p, "bob")), Pending)


def test_a_plan_without_a_risk_score_counts_as_the_riskiest():
    p = plan(None)
    assert plan_risk(p) == 1.0
    assert named().required(p) == 2


@pytest.mark.parametrize("risk", [math.nan, math.inf, -math.inf, -0.5, 7.0])
def test_a_risk_that_is_no_number_within_bounds_counts_as_the_riskiest(risk):
    parsed = dataclasses.replace(parse_plan(LOW), risk=risk)  # past the parser, in defence
    policy = named()
    assert plan_risk(parsed) == 1.0 and policy.required(parsed) == 2
    verdict = policy.evaluate(parsed, "alice", [Approval("bob", parsed.digest)])
    assert isinstance(verdict, Pending) and verdict.needs == 1
    assert not ApprovalPolicy(auto_approve="low_risk").auto_approves(parsed)


def test_a_nan_risk_in_the_json_is_a_plan_no_one_can_approve():
    p = plan(math.nan)
    policy = named()
    assert policy.required(p) == 2
    assert isinstance(policy.evaluate(p, "alice", yes(p, "bob", "carol")), Refused)


def test_a_plan_that_does_not_meet_the_contract_is_refused_and_never_automatic():
    broken = plan(0.0, action="noop", rollback={"steps": [{"action": "noop"}],
                                                 "action": "script.exec",
                                                 "params": {"argv": ["touch", "/tmp/x"]}})
    for mode in ("noop_only", "low_risk"):
        policy = ApprovalPolicy(auto_approve=mode)  # type: ignore[arg-type]
        assert not policy.auto_approves(broken) and not noop_only(broken)
        verdict = policy.evaluate(broken, "alice", yes(broken, AUTO_APPROVER))
        assert isinstance(verdict, Refused) and "ChangePlan schema" in verdict.reason


def test_approvals_of_another_plan_hash_do_not_count():
    other = Approval("bob", plan_hash(HIGH))
    verdict = named().evaluate(LOW, "alice", [other])
    assert isinstance(verdict, Pending) and verdict.needs == 1


def test_one_bad_approval_refuses_the_lot():
    policy = ApprovalPolicy(approvers=frozenset({"bob", "carol"}))
    verdict = policy.evaluate(HIGH, "alice", yes(HIGH, "bob", "mallory", "carol"))
    assert isinstance(verdict, Refused) and "mallory" in verdict.reason


# -- automatic approval -------------------------------------------------------------------------

NOOP = plan(0.9, action="noop")


def test_noop_only_means_every_step_and_every_rollback_step():
    assert noop_only(NOOP)
    assert not noop_only(plan(0.0, action="noop", rollback={"action": "gateway.flip"}))
    assert not noop_only(plan(0.0, action="noop", rollback={"steps": [{"action": "noop"},
                                                                      {"action": "k8s.rollout"}]}))
    assert noop_only(plan(0.0, action="noop", rollback={"steps": []}))
    assert not noop_only(plan(0.0, action="script.exec"))


@pytest.mark.parametrize(
    ("mode", "p", "auto"),
    [("off", NOOP, False), ("off", plan(0.0), False),
     ("noop_only", NOOP, True), ("noop_only", plan(0.0), False),
     ("low_risk", NOOP, True), ("low_risk", plan(0.29), True), ("low_risk", plan(0.3), False),
     ("low_risk", plan(None), False)],
)
def test_which_plans_approve_themselves(mode, p, auto):
    policy = ApprovalPolicy(auto_approve=mode)
    assert policy.auto_approves(p) is auto
    verdict = policy.evaluate(p, "alice", yes(p, AUTO_APPROVER))
    assert isinstance(verdict, Satisfied if auto else Refused)


def test_the_automatic_threshold_is_configurable():
    policy = ApprovalPolicy(auto_approve="low_risk", auto_approve_max_risk=0.5)
    assert policy.auto_approves(plan(0.45)) and not policy.auto_approves(plan(0.5))


def test_an_automatic_approval_says_why_it_was_refused():
    policy = ApprovalPolicy(auto_approve="noop_only")
    verdict = policy.evaluate(LOW, "alice", yes(LOW, AUTO_APPROVER))
    assert isinstance(verdict, Refused) and "noop-only" in verdict.reason


@pytest.mark.parametrize("bad", [{"auto_approve": "always"}, {"two_person_risk": 1.5},
                                 {"auto_approve_max_risk": -0.1}, {"approval_ttl_s": 0},
                                 {"approval_ttl_s": math.nan}, {"approval_ttl_s": math.inf}])
def test_a_nonsensical_policy_fails_at_start(bad):
    with pytest.raises(ValueError):
        ApprovalPolicy(**bad)


@pytest.mark.parametrize(("ttl", "words"), [(3600, "1 h"), (5400, "1.5 h"), (1800, "30 min"),
                                            (90, "1.5 min"), (45, "45 s"), (0.5, "0.5 s")])
def test_the_approval_ttl_in_words_and_when_it_ends(ttl, words):
    policy = ApprovalPolicy(approval_ttl_s=ttl)
    assert policy.describe_ttl() == words
    at_gate = datetime(2026, 11, 23, 7, 0, tzinfo=UTC)
    assert policy.approval_expires_at(at_gate) == at_gate + timedelta(seconds=ttl)
    assert named().describe_ttl() == "1 h"


@pytest.mark.parametrize("value", ["0", "0.5", "604801", "nan"])
def test_the_approval_ttl_setting_has_bounds(value, monkeypatch):
    monkeypatch.setenv("OPSGATE_APPROVAL_TTL_S", value)
    with pytest.raises(ValidationError, match="approval_ttl_s"):
        Settings(database_url="sqlite://")
    monkeypatch.setenv("OPSGATE_APPROVAL_TTL_S", "900")
    assert Settings(database_url="sqlite://").approval_ttl_s == 900
