"""Block Kit builders are pure: the plan message's parts and buttons, its decided forms, the
/case answers readable on a phone."""

from __future__ import annotations

import json

from bot.blocks import (
    PlanDecisionView,
    case_list,
    case_timeline,
    help_message,
    plan_message,
    reject_modal,
    who,
)
from bot.ids import REASON_BLOCK, Action, Subcommand, View
from core.domain.policy import ApprovalPolicy
from tests.support.cases import PLAN, PLAN_HASH
from tests.support.slack import block_kit_problems

CASE = {"case_id": "0f0e0d0c-0000-4000-8000-000000000001", "title": "checkout 5xx",
        "status": "WAIT_GATE", "version": 3, "severity": "SEV2",
        "updated_at": "2026-11-23T07:00:00+00:00"}
POLICY = ApprovalPolicy(approvers=frozenset({"U0BOB", "U0CAROL"}))


def buttons(blocks: list[dict]) -> list[tuple[str, str, str]]:
    """The buttons that decide (``Details`` only shows the JSON, and stays)."""
    return [(e["action_id"], e["text"]["text"], e["value"]) for b in blocks
            if b["type"] == "actions" for e in b["elements"] if e["action_id"] != Action.DETAILS]


def details(blocks: list[dict]) -> list[str]:
    return [e["value"] for b in blocks if b["type"] == "actions" for e in b["elements"]
            if e["action_id"] == Action.DETAILS]


def test_plan_message_shows_every_part_and_two_bound_buttons() -> None:
    text, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY)
    shown = json.dumps(blocks, ensure_ascii=False)
    assert PLAN["title"] in text and "risk 0.2" in text
    for part in ("*Risk* 0.2: it changes nothing — needs one approver", "*Steps*",
                 "1. Change nothing _(up to 30 s)_",
                 "*Rollback*", "*Verify*", "`error_rate` below 0.01 once the change is done",
                 "<@U0ALICE>", PLAN_HASH[:12], "case version 3"):
        assert part in shown, part
    assert '\\"action\\"' not in shown and "noop" not in shown  # words, not the JSON
    assert buttons(blocks) == [(Action.APPROVE, "Approve", "ap_1"),
                               (Action.REJECT, "Reject", "ap_1")]
    assert details(blocks) == ["ap_1"]  # the exact JSON is one click away


def test_a_risky_plan_says_it_needs_two_approvers() -> None:
    _, blocks = plan_message(CASE, {**PLAN, "risk_score": 0.8}, PLAN_HASH, "ap_1", "U0ALICE",
                             POLICY)
    assert "needs two distinct approvers" in json.dumps(blocks)


def test_decided_plan_messages_lose_their_buttons_and_say_who_and_when() -> None:
    approved = PlanDecisionView("approved", ["U0BOB", "U0CAROL"], "2026-11-23 07:01:02 UTC")
    text, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY, approved)
    assert buttons(blocks) == [] and details(blocks) == ["ap_1"]
    assert "approved by U0BOB, U0CAROL" in text
    assert "Approved* by <@U0BOB>, <@U0CAROL> at 2026-11-23 07:01:02 UTC" in json.dumps(blocks)
    rejected = PlanDecisionView("rejected", ["U0BOB"], "2026-11-23 07:01:02 UTC",
                                reason="wrong pods")
    _, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY, rejected)
    assert buttons(blocks) == [] and "wrong pods" in json.dumps(blocks)
    pending = PlanDecisionView("pending", ["U0BOB"], "2026-11-23 07:01:02 UTC", needs=1)
    _, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY, pending)
    assert len(buttons(blocks)) == 2 and "1 more approval(s) needed" in json.dumps(blocks)


def approve_button(blocks: list[dict]) -> dict:
    return next(e for b in blocks if b["type"] == "actions" for e in b["elements"]
                if e["action_id"] == Action.APPROVE)


def test_a_high_risk_approve_button_asks_to_confirm_and_a_low_risk_one_does_not() -> None:
    risky = {**PLAN, "title": "Fail over checkout to eu-west", "risk_score": 0.8}
    _, blocks = plan_message(CASE, risky, PLAN_HASH, "ap_1", "U0ALICE", POLICY)
    confirm = approve_button(blocks)["confirm"]
    assert confirm["title"]["text"] == "Approve a high-risk plan?"
    assert "“Fail over checkout to eu-west”" in confirm["text"]["text"]
    assert "risk 0.8" in confirm["text"]["text"]
    assert (confirm["confirm"]["text"], confirm["deny"]["text"], confirm["style"]) == (
        "Approve", "Cancel", "danger")
    assert block_kit_problems(blocks) == []
    at_the_bound = {**PLAN, "risk_score": POLICY.two_person_risk}
    _, blocks = plan_message(CASE, at_the_bound, PLAN_HASH, "ap_1", "U0ALICE", POLICY)
    assert "confirm" in approve_button(blocks)
    _, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY)  # risk 0.2
    assert "confirm" not in approve_button(blocks)
    reject = next(e for b in blocks if b["type"] == "actions" for e in b["elements"]
                  if e["action_id"] == Action.REJECT)
    assert "confirm" not in reject  # the reason modal is its own confirmation


def test_the_confirm_dialog_stays_within_slacks_limits_whatever_the_title() -> None:
    long_title = {**PLAN, "title": ("Drain " + "every-node-of-the-cluster " * 8)[:200],
                  "risk_score": 1.0}  # the schema's longest title
    _, blocks = plan_message(CASE, long_title, PLAN_HASH, "ap_1", "U0ALICE", POLICY)
    text = approve_button(blocks)["confirm"]["text"]["text"]
    assert len(text) == 300 and "…” has risk 1" in text
    assert block_kit_problems(blocks) == []
    broken = json.loads(json.dumps(blocks))
    approve_button(broken)["confirm"]["title"]["text"] = "x" * 101
    assert block_kit_problems(broken) == [
        "must be between 1 and 100 characters "
        "[json-pointer:/blocks/6/elements/0/confirm/title/text]"]


def test_the_plan_message_shows_the_quorums_progress() -> None:
    risky = {**PLAN, "risk_score": 0.9}
    pending = PlanDecisionView("pending", ["U0BOB"], "2026-11-23 07:01:02 UTC", needs=1)
    _, blocks = plan_message(CASE, risky, PLAN_HASH, "ap_1", "U0ALICE", POLICY, pending)
    shown = json.dumps(blocks, ensure_ascii=False)
    assert "👍 1 of 2: <@U0BOB> · 1 more approval(s) needed" in shown
    assert len(buttons(blocks)) == 2 and "confirm" in approve_button(blocks)


def test_an_expired_plan_message_loses_its_buttons_and_says_so() -> None:
    expired = PlanDecisionView("expired", ["gatekeeper"], "2026-11-23 08:00:00 UTC",
                                reason="approval expired after 1 h")
    text, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY, expired)
    assert buttons(blocks) == []
    assert text.endswith("— approval expired after 1 h")
    assert "⌛ *Approval expired after 1 h* — ask the agent for a fresh plan " \
           "_(2026-11-23 08:00:00 UTC)_" in json.dumps(blocks, ensure_ascii=False)


def test_long_params_are_cut_for_phones() -> None:
    plan = {**PLAN, "steps": [{"action": "noop", "params": {"note": "x" * 500},
                               "timeout_s": 30, "retry": 0}]}
    _, blocks = plan_message(CASE, plan, PLAN_HASH, "ap_1", "U0ALICE", POLICY)
    steps = next(b["text"]["text"] for b in blocks if "*Steps*" in b.get("text", {}).get(
        "text", ""))
    assert len(steps) < 200 and "…" in steps


def test_reject_modal_asks_for_a_reason() -> None:
    modal = reject_modal("Restart <!channel> the checkout pods", '{"approval_id": "ap_1"}')
    assert modal["callback_id"] == View.REJECT_REASON
    asked = modal["blocks"][0]["text"]["text"]
    assert asked == ("Why is plan “Restart &lt;!channel&gt; the checkout pods” rejected? The "
                     "case parks with your reason.")  # the plan by its title, no internal id
    assert "ap_1" not in json.dumps(modal["blocks"])
    assert [b.get("block_id") for b in modal["blocks"]][-1] == REASON_BLOCK
    assert modal["submit"]["text"] == "Reject"


def test_case_answers() -> None:
    rows = [{"event": f"e{i}", "actor": "U0BOB", "reason": None, "meta": {},
             "created_at": "2026-11-23T07:00:00+00:00"} for i in range(40)]
    text, blocks = case_timeline(CASE, rows)
    assert "Timeline of case 0f0e0d0c" in text
    assert "25 earlier row(s) not shown" in json.dumps(blocks) and "e39" in json.dumps(blocks)
    assert "none" in case_list([], "CLOSED")[0]
    usage = json.dumps(help_message("Unknown subcommand `x`.")[1])
    for subcommand in Subcommand:
        assert f"/case {subcommand.value}" in usage
    assert who("U0BOB") == "<@U0BOB>" and who("executor") == "executor"
