"""Approvals at the gate on both databases: every policy rule, stale and duplicate clicks, and two
approvers clicking at once — enforced by the case service, whatever the front end does."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from sqlalchemy import Engine, select

from core.api.statuses import reply_status
from core.cases.approvals import GateStatus
from core.cases.replies import Reply
from core.cases.service import CaseService
from core.db.tables import case_timeline, outbox, plan_approved
from core.domain.commands import ApprovePlan, RejectPlan, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.domain.plans import plan_hash
from core.domain.policy import AUTO_APPROVER, ApprovalPolicy
from core.errors import NotFound
from tests.support.cases import (
    APPROVERS,
    PLAN,
    REQUESTER,
    case_service,
    command,
    key,
    open_case,
    snapshot,
)
from tests.support.clock import Clock

E, S = CaseEvent, CaseStatus

HIGH_RISK = {**PLAN, "title": "Fail over to the standby region", "risk_score": 0.8}
NOOP_PLAN = {**PLAN, "title": "Watch only", "risk_score": 0.0,
             "steps": [{"action": "noop", "params": {}, "timeout_s": 10, "retry": 0}]}
SCRIPT_PLAN = {**PLAN, "title": "Restart checkout", "risk_score": 0.1,
               "steps": [{"action": "script.exec", "params": {"argv": ["restart-checkout"]},
                          "timeout_s": 60, "retry": 0}]}


def waiting(service: CaseService, plan: dict[str, Any] = PLAN) -> UUID:
    """A case opened by REQUESTER, waiting at the gate on ``plan``."""
    case_id = open_case(service)
    for event in (E.START_ANALYSIS, E.ANALYSIS_DONE):
        assert service.transition(command(case_id, event), key()).ok
    assert service.transition(command(case_id, E.PLAN_READY, plan=plan), key()).ok
    return case_id


def approve(service: CaseService, case_id: UUID, approver: str, plan: dict[str, Any] = PLAN,
            k: str | None = None, **extra: Any) -> Reply:
    return service.approve_plan(ApprovePlan(case_id, plan_hash(plan), approver, **extra),
                                k or key())


def error(reply: Reply) -> tuple[int, str, str]:
    assert not reply.ok, reply.body
    err = json.loads(reply.body)["error"]
    return reply_status(reply), err["code"], err["message"]


def rows(engine: Engine, table: Any, case_id: UUID) -> list[Any]:
    with engine.connect() as conn:
        query = select(table).where(table.c.case_id == case_id)
        order = table.c.id if table is not plan_approved else table.c.created_at
        return list(conn.execute(query.order_by(order)).mappings())


def topics(engine: Engine, case_id: UUID) -> list[str]:
    with engine.connect() as conn:
        query = select(outbox.c.topic).where(outbox.c.key == str(case_id)).order_by(outbox.c.id)
        return list(conn.execute(query).scalars())


# -- one approver, low risk --------------------------------------------------------------------


def test_an_approval_by_someone_else_moves_the_case_to_executing_in_one_step(service, engine):
    case_id = waiting(service)
    before = topics(engine, case_id)
    data = approve(service, case_id, "bob").data()
    assert (data["status"], data["version"], data["plan_hash"]) == ("EXECUTING", 4, plan_hash(PLAN))
    assert data["approval"]["state"] == "approved" and data["approval"]["approvers"] == ["bob"]
    [decision] = [row["decision"] for row in rows(engine, plan_approved, case_id)]
    assert (decision["approver"], decision["verdict"]) == ("bob", "approved") and decision["at"]
    last = rows(engine, case_timeline, case_id)[-1]
    assert (last["event"], last["actor"]) == ("gate_approved", "bob")
    assert last["meta"]["context"] == {"approvers": ["bob"]}
    assert topics(engine, case_id)[len(before):] == [Topic.CASE_TRANSITION, Topic.PLAN_APPROVED,
                                                    Topic.EXEC_RUN]


def test_the_requester_cannot_approve_their_own_plan_and_only_an_audit_line_is_left(
        service, engine):
    case_id = waiting(service)
    before = snapshot(engine, case_id)
    status, code, message = error(approve(service, case_id, REQUESTER))
    assert (status, code) == (422, "approval_refused")
    assert f"{REQUESTER} requested this plan" in message
    after = snapshot(engine, case_id)
    assert after["case"] == before["case"]
    assert (after["plan_approved"], after["outbox"]) == (before["plan_approved"], before["outbox"])
    assert after["case_timeline"] == before["case_timeline"] + 1
    audit = rows(engine, case_timeline, case_id)[-1]
    assert (audit["event"], audit["actor"], audit["meta"]["outcome"]) == (
        "plan_approval", REQUESTER, "refused")


def test_someone_off_the_approver_list_is_refused(engine):
    service = case_service(engine, policy=ApprovalPolicy(approvers=frozenset({"U1", "U2"})))
    case_id = waiting(service)
    status, code, message = error(approve(service, case_id, "U9"))
    assert (status, code) == (422, "approval_refused") and "U9 is not an approver" in message
    assert service.get_case(case_id)["status"] == "WAIT_GATE"
    assert rows(engine, plan_approved, case_id) == []
    assert approve(service, case_id, "U2").data()["status"] == "EXECUTING"


def test_a_member_of_an_approver_group_may_approve(engine):
    groups = {"S-sre": {"U7"}}
    policy = ApprovalPolicy(approvers=frozenset({"S-sre"}),
                            members=lambda group: groups.get(group, set()))
    service = case_service(engine, policy=policy)
    case_id = waiting(service)
    assert error(approve(service, case_id, "U8"))[1] == "approval_refused"
    assert approve(service, case_id, "U7").data()["status"] == "EXECUTING"


# -- two approvers for high risk ---------------------------------------------------------------


def test_a_high_risk_plan_needs_two_distinct_approvers(service, engine):
    case_id = waiting(service, HIGH_RISK)
    first = approve(service, case_id, "bob", HIGH_RISK).data()
    assert (first["status"], first["version"]) == ("WAIT_GATE", 3)
    assert first["approval"] | {"reason": ""} == {
        "state": "pending", "approvers": ["bob"], "needs": 1, "recorded": True, "reason": ""}
    note = rows(engine, case_timeline, case_id)[-1]
    assert (note["event"], note["meta"]["outcome"], note["meta"]["needs"]) == (
        "plan_approval", "note", 1)
    assert topics(engine, case_id)[-1] == Topic.APPROVAL_RECORDED
    second = approve(service, case_id, "carol", HIGH_RISK).data()
    assert (second["status"], second["version"]) == ("EXECUTING", 4)
    assert second["approval"]["approvers"] == ["bob", "carol"]
    moved = [r for r in rows(engine, case_timeline, case_id) if r["event"] == "gate_approved"]
    assert len(moved) == 1 and moved[0]["meta"]["context"] == {"approvers": ["bob", "carol"]}
    assert len(rows(engine, plan_approved, case_id)) == 2


def test_a_double_click_under_the_same_key_replays(service, engine):
    case_id = waiting(service, HIGH_RISK)
    k = key()
    first = approve(service, case_id, "bob", HIGH_RISK, k=k)
    again = approve(service, case_id, "bob", HIGH_RISK, k=k)
    assert again.replayed and again.body == first.body
    assert len(rows(engine, plan_approved, case_id)) == 1


def test_a_double_click_under_another_key_counts_once(service, engine):
    case_id = waiting(service, HIGH_RISK)
    approve(service, case_id, "bob", HIGH_RISK).data()
    before = snapshot(engine, case_id)
    again = approve(service, case_id, "bob", HIGH_RISK).data()
    assert again["status"] == "WAIT_GATE"
    assert (again["approval"]["state"], again["approval"]["recorded"]) == ("pending", False)
    after = snapshot(engine, case_id)
    assert after["idempotency"] == before["idempotency"] + 1
    assert {k: v for k, v in after.items() if k != "idempotency"} == {
        k: v for k, v in before.items() if k != "idempotency"}


def test_a_click_after_the_decision_is_refused_as_already_decided(service):
    case_id = waiting(service)
    approve(service, case_id, "bob").data()
    status, code, message = error(approve(service, case_id, "carol"))
    assert (status, code) == (409, "illegal_transition")
    assert "this plan was already decided" in message


# -- stale clicks ------------------------------------------------------------------------------


def test_an_approval_for_an_older_plan_is_refused(service, engine):
    case_id = waiting(service)
    service.reject_plan(RejectPlan(case_id, plan_hash(PLAN), "bob", "too broad"), key()).data()
    assert service.transition(command(case_id, E.RESUME), key()).ok
    assert service.transition(command(case_id, E.PLAN_READY, plan=HIGH_RISK), key()).ok
    status, code, message = error(approve(service, case_id, "carol", PLAN))
    assert (status, code) == (422, "stale_plan")
    assert "this approval is for an older plan" in message
    assert rows(engine, case_timeline, case_id)[-1]["meta"]["outcome"] == "refused"
    assert service.get_case(case_id)["status"] == "WAIT_GATE"


def test_an_approval_naming_no_plan_of_the_case_is_refused(service):
    case_id = waiting(service)
    reply = service.approve_plan(ApprovePlan(case_id, "0" * 64, "bob"), key())
    status, code, message = error(reply)
    assert (status, code) == (422, "stale_plan") and "does not name the plan" in message


def test_an_approval_made_on_an_outdated_view_is_412(service):
    case_id = waiting(service)
    assert error(approve(service, case_id, "bob", expected_version=2))[:2] == (
        412, "version_conflict")
    assert approve(service, case_id, "bob", expected_version=3).data()["status"] == "EXECUTING"


def test_an_approval_outside_the_gate_is_409(service):
    case_id = open_case(service)
    status, code, _ = error(approve(service, case_id, "bob"))
    assert (status, code) == (409, "illegal_transition")


def test_a_re_proposed_plan_starts_without_the_old_proposals_approvals(service, engine):
    case_id = waiting(service, HIGH_RISK)
    approve(service, case_id, "bob", HIGH_RISK).data()
    service.reject_plan(RejectPlan(case_id, plan_hash(HIGH_RISK), "carol", "not now"),
                        key()).data()
    assert service.transition(command(case_id, E.RESUME, reason="retry"), key()).ok  # asked again
    assert service.transition(command(case_id, E.PLAN_READY, plan=HIGH_RISK), key()).ok
    again = approve(service, case_id, "dave", HIGH_RISK).data()
    assert (again["status"], again["approval"]["approvers"]) == ("WAIT_GATE", ["dave"])


def test_one_click_evaluates_the_policy_once(engine):
    judged: list[str] = []

    class Counting(ApprovalPolicy):
        def evaluate(self, plan: Any, requester: str, approvals: Any) -> Any:
            judged.append(requester)
            return super().evaluate(plan, requester, approvals)

    service = case_service(engine, policy=Counting(approvers=APPROVERS))
    case_id = waiting(service)
    judged.clear()
    assert approve(service, case_id, "bob").data()["status"] == "EXECUTING"
    assert judged == [REQUESTER]


# -- rejection ---------------------------------------------------------------------------------


def test_a_rejection_parks_the_case_with_the_reason(service, engine):
    case_id = waiting(service)
    data = service.reject_plan(RejectPlan(case_id, plan_hash(PLAN), "bob", "wrong service"),
                               key()).data()
    assert (data["status"], data["plan_hash"]) == ("PARKED", plan_hash(PLAN))
    last = rows(engine, case_timeline, case_id)[-1]
    assert (last["event"], last["actor"], last["reason"]) == ("gate_rejected", "bob",
                                                              "wrong service")
    [decision] = [r["decision"] for r in rows(engine, plan_approved, case_id)]
    assert decision | {"at": ""} == {"approver": "bob", "verdict": "rejected",
                                     "reason": "wrong service", "at": ""}
    assert Topic.PLAN_REJECTED in topics(engine, case_id)


@pytest.mark.parametrize(("approver", "code"), [(REQUESTER, "approval_refused"),
                                                ("U9", "approval_refused")])
def test_the_approver_rules_apply_to_a_rejection(engine, approver, code):
    service = case_service(engine, policy=ApprovalPolicy(approvers=frozenset({"U1", REQUESTER})))
    case_id = waiting(service)
    reply = service.reject_plan(RejectPlan(case_id, plan_hash(PLAN), approver, "no"), key())
    assert error(reply)[:2] == (422, code)
    assert service.get_case(case_id)["status"] == "WAIT_GATE"


def test_a_rejection_needs_a_reason_and_the_current_plan(service):
    case_id = waiting(service)
    blank = service.reject_plan(RejectPlan(case_id, plan_hash(PLAN), "bob", "  "), key())
    assert error(blank)[:2] == (422, "invalid_request")
    stale = service.reject_plan(RejectPlan(case_id, "0" * 64, "bob", "no"), key())
    assert error(stale)[:2] == (422, "stale_plan")


def test_may_reject_asks_the_checks_reject_plan_makes_and_writes_nothing(engine):
    service = case_service(engine, policy=ApprovalPolicy(approvers=frozenset({"U1", REQUESTER})))
    case_id = waiting(service)
    digest = plan_hash(PLAN)
    before = snapshot(engine, case_id)
    assert service.may_reject(case_id, digest, "U1", expected_version=3)
    assert not service.may_reject(case_id, digest, REQUESTER, expected_version=3)
    assert not service.may_reject(case_id, digest, "U9", expected_version=3)
    assert not service.may_reject(case_id, digest, "U1", expected_version=2)
    assert not service.may_reject(case_id, "0" * 64, "U1")
    assert snapshot(engine, case_id) == before
    service.reject_plan(RejectPlan(case_id, digest, "U1", "not now"), key()).data()
    assert not service.may_reject(case_id, digest, "U1")
    with pytest.raises(NotFound):
        service.may_reject(uuid4(), digest, "U1")


# -- the raw gate_approved transition cannot skip the policy -----------------------------------


def test_a_raw_gate_approved_is_held_to_the_same_policy(service, engine):
    case_id = waiting(service, HIGH_RISK)
    digest = plan_hash(HIGH_RISK)
    by_requester = service.transition(command(case_id, E.GATE_APPROVED, actor=REQUESTER,
                                              plan_hash=digest), key())
    assert error(by_requester)[:2] == (422, "approval_refused")
    forged = command(case_id, E.GATE_APPROVED, actor="bob", plan_hash=digest,
                     meta={"approvals": ["bob", "carol"]})
    status, code, message = error(service.transition(forged, key()))
    assert (status, code) == (422, "guard_failed") and "two distinct approvers" in message
    assert rows(engine, plan_approved, case_id) == []
    approve(service, case_id, "bob", HIGH_RISK).data()
    raw = service.transition(command(case_id, E.GATE_APPROVED, actor="carol", plan_hash=digest),
                             key())
    assert raw.data()["status"] == "EXECUTING"
    assert [r["decision"]["approver"] for r in rows(engine, plan_approved, case_id)] == [
        "bob", "carol"]


def test_a_raw_gate_rejected_is_held_to_the_approver_rules(service):
    case_id = waiting(service)
    reply = service.transition(TransitionCase(case_id, E.GATE_REJECTED, actor=REQUESTER), key())
    assert error(reply)[:2] == (422, "approval_refused")


# -- the approval's expiry ---------------------------------------------------------------------


def test_a_raw_gate_expired_waits_for_the_ttl_and_names_the_plan(engine):
    clock = Clock()
    service = case_service(engine, clock=clock,
                           policy=ApprovalPolicy(approvers=APPROVERS, approval_ttl_s=1800))
    case_id = waiting(service)
    expire = command(case_id, E.GATE_EXPIRED, actor=AUTO_APPROVER, reason="nobody decided")
    clock.now += timedelta(seconds=1799)
    status, code, message = error(service.transition(expire, key()))
    assert (status, code) == (422, "guard_failed")
    assert "expires at" in message and "30 min after it reached the gate" in message
    unnamed = TransitionCase(case_id, E.GATE_EXPIRED, actor=AUTO_APPROVER)
    clock.now += timedelta(seconds=1)
    assert error(service.transition(unnamed, key()))[:2] == (422, "stale_plan")
    assert service.get_case(case_id)["status"] == "WAIT_GATE"
    assert rows(engine, plan_approved, case_id) == []

    assert service.transition(expire, key()).data()["status"] == "PARKED"
    [expiry] = rows(engine, plan_approved, case_id)
    assert expiry["decision"]["verdict"] == "expired"
    assert expiry["decision"]["reason"] == "nobody decided"
    assert Topic.PLAN_EXPIRED in topics(engine, case_id)


def test_a_decision_after_the_expiry_says_the_approval_expired(engine):
    clock = Clock()
    service = case_service(engine, clock=clock)  # the default TTL: an hour, APPROVERS named
    case_id = waiting(service)
    clock.now += timedelta(hours=1)
    expire = command(case_id, E.GATE_EXPIRED, actor=AUTO_APPROVER)
    assert service.transition(expire, key()).ok
    for late in (approve(service, case_id, "bob"),
                 service.reject_plan(RejectPlan(case_id, plan_hash(PLAN), "bob", "no"), key())):
        status, code, message = error(late)
        assert (status, code) == (409, "illegal_transition")
        assert message == ("the case is PARKED, not waiting at the gate: approval expired "
                           "after 1 h — ask the agent for a fresh plan")
    assert [r["decision"]["verdict"] for r in rows(engine, plan_approved, case_id)] == [
        "expired"]


# -- automatic approval ------------------------------------------------------------------------


def test_the_gatekeeper_approves_only_what_the_policy_lets_approve_itself(engine):
    service = case_service(engine, policy=ApprovalPolicy(auto_approve="noop_only"))
    noop_case = waiting(service, NOOP_PLAN)
    data = approve(service, noop_case, AUTO_APPROVER, NOOP_PLAN).data()
    assert data["status"] == "EXECUTING" and "automatic approval" in data["approval"]["reason"]
    risky_case = waiting(service, SCRIPT_PLAN)
    status, code, message = error(approve(service, risky_case, AUTO_APPROVER, SCRIPT_PLAN))
    assert (status, code) == (422, "approval_refused") and "noop-only" in message


def test_with_automatic_approval_off_the_gatekeeper_is_refused(service):
    case_id = waiting(service, NOOP_PLAN)
    assert error(approve(service, case_id, AUTO_APPROVER, NOOP_PLAN))[1] == "approval_refused"


# -- concurrency -------------------------------------------------------------------------------


def race(*clicks: Any) -> list[Reply]:
    """Run the clicks at the same moment, each on its own thread."""
    barrier = threading.Barrier(len(clicks))
    replies: list[Reply | None] = [None] * len(clicks)

    def click(n: int) -> None:
        barrier.wait()
        replies[n] = clicks[n]()

    threads = [threading.Thread(target=click, args=(n,)) for n in range(len(clicks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(reply is not None for reply in replies)
    return [reply for reply in replies if reply is not None]


@pytest.mark.parametrize("round_", range(5))
def test_two_approvers_at_once_on_a_high_risk_plan_make_exactly_one_decision(
        service, engine, round_):
    case_id = waiting(service, HIGH_RISK)
    replies = race(lambda: approve(service, case_id, "bob", HIGH_RISK),
                   lambda: approve(service, case_id, "carol", HIGH_RISK))
    assert all(reply.ok for reply in replies), [r.body for r in replies]
    assert sorted(r.data()["status"] for r in replies) == ["EXECUTING", "WAIT_GATE"]
    timeline = rows(engine, case_timeline, case_id)
    assert [r["event"] for r in timeline].count("gate_approved") == 1
    assert topics(engine, case_id).count(Topic.EXEC_RUN) == 1
    assert len(rows(engine, plan_approved, case_id)) == 2
    assert service.get_case(case_id)["version"] == 4


@pytest.mark.parametrize("round_", range(3))
def test_three_approvers_at_once_on_a_low_risk_plan_make_one_decision(service, engine, round_):
    case_id = waiting(service)
    replies = race(*(lambda who=who: approve(service, case_id, who)
                     for who in ("bob", "carol", "dave")))
    assert sorted(reply_status(r) for r in replies) == [200, 409, 409]
    assert [r["event"] for r in rows(engine, case_timeline, case_id)].count("gate_approved") == 1
    assert len(rows(engine, plan_approved, case_id)) == 1


def test_one_approver_double_clicking_under_two_keys_at_once_counts_once(service, engine):
    case_id = waiting(service, HIGH_RISK)
    replies = race(lambda: approve(service, case_id, "bob", HIGH_RISK),
                   lambda: approve(service, case_id, "bob", HIGH_RISK))
    assert all(reply.ok for reply in replies)
    assert len(rows(engine, plan_approved, case_id)) == 1
    assert service.get_case(case_id)["status"] == "WAIT_GATE"


# -- where the gate stands (CaseService.gate_status) -------------------------------------------


def status(service: CaseService, case_id: UUID, plan: dict[str, Any] = PLAN) -> GateStatus:
    found = service.gate_status(case_id, plan_hash(plan))
    assert found is not None
    return found


def test_a_plan_nobody_decided_is_pending_until_its_expiry(service):
    case_id = waiting(service, HIGH_RISK)
    standing = status(service, case_id, HIGH_RISK)
    assert (standing.state, standing.needed, standing.needs, standing.approvers) == (
        "pending", 2, 2, ())
    assert standing.requester == REQUESTER and not standing.decided
    assert standing.automatic == "automatic approval is off"
    case = service.get_case(case_id)
    assert standing.expires_at is not None
    assert standing.expires_at.isoformat() > case["updated_at"]
    assert service.gate_status(case_id) == standing  # the latest plan by default


def test_one_yes_of_two_leaves_it_pending_and_the_second_approves_it(service):
    case_id = waiting(service, HIGH_RISK)
    digest = plan_hash(HIGH_RISK)
    assert service.approve_plan(ApprovePlan(case_id, digest, "alice"), key()).ok
    one = status(service, case_id, HIGH_RISK)
    assert (one.needs, one.approvers, one.recorded) == (1, ("alice",), ("alice",))
    assert service.approve_plan(ApprovePlan(case_id, digest, "bob"), key()).ok
    standing = status(service, case_id, HIGH_RISK)
    assert (standing.state, standing.needs, sorted(standing.approvers)) == (
        "approved", 0, ["alice", "bob"])
    assert standing.decided and standing.expires_at is None


def test_a_no_rejects_it_and_names_who_said_it(service):
    case_id = waiting(service)
    no = RejectPlan(case_id, plan_hash(PLAN), "carol", "not during the sale")
    assert service.reject_plan(no, key()).ok
    standing = status(service, case_id)
    assert (standing.state, standing.rejected_by, standing.reason) == (
        "rejected", "carol", "not during the sale")
    assert standing.decided and standing.expires_at is None


def test_a_plan_nobody_decided_in_time_is_expired(engine):
    clock = Clock()
    service = case_service(engine, clock=clock,
                           policy=ApprovalPolicy(approvers=APPROVERS, approval_ttl_s=60))
    case_id = waiting(service)
    clock.advance(61)
    expire = TransitionCase(case_id, E.GATE_EXPIRED, actor="gatekeeper",
                            plan_hash=plan_hash(PLAN))
    assert service.transition(expire, key()).ok
    standing = status(service, case_id)
    assert (standing.state, standing.reason) == ("expired", "approval expired after 1 min")


def test_a_case_without_that_plan_has_no_standing_and_an_unknown_case_is_not_found(service):
    case_id = open_case(service)
    assert service.gate_status(case_id) is None
    assert service.gate_status(case_id, "0" * 64) is None
    with pytest.raises(NotFound):
        service.gate_status(UUID(int=0))
