"""Block Kit builders are pure: the plan message's parts and buttons, its decided forms, the
/case answers readable on a phone."""

from __future__ import annotations

import json

from bot.blocks import (
    Decision,
    case_list,
    case_timeline,
    help_message,
    plan_message,
    reject_modal,
    who,
)
from bot.ids import REASON_BLOCK, Action, Subcommand, View
from core.domain.policy import ApprovalPolicy
from tests.support import PLAN, PLAN_HASH

CASE = {"case_id": "0f0e0d0c-0000-4000-8000-000000000001", "title": "checkout 5xx",
        "status": "WAIT_GATE", "version": 3, "severity": "SEV2",
        "updated_at": "2026-11-23T07:00:00+00:00"}
POLICY = ApprovalPolicy(approvers=frozenset({"U0BOB", "U0CAROL"}))


def buttons(blocks: list[dict]) -> list[tuple[str, str, str]]:
    return [(e["action_id"], e["text"]["text"], e["value"]) for b in blocks
            if b["type"] == "actions" for e in b["elements"]]


def test_plan_message_shows_every_part_and_two_bound_buttons() -> None:
    text, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY)
    shown = json.dumps(blocks, ensure_ascii=False)
    assert PLAN["title"] in text and "risk 0.2" in text
    for part in ("*Risk* 0.2", "needs one approver", "*Steps*", "`noop`", "*Rollback*",
                 "*Verify*", "error_rate", "<@U0ALICE>", PLAN_HASH[:12], "case version 3"):
        assert part in shown, part
    assert buttons(blocks) == [(Action.APPROVE, "Approve", "ap_1"),
                               (Action.REJECT, "Reject", "ap_1")]


def test_a_risky_plan_says_it_needs_two_approvers() -> None:
    _, blocks = plan_message(CASE, {**PLAN, "risk_score": 0.8}, PLAN_HASH, "ap_1", "U0ALICE",
                             POLICY)
    assert "needs two distinct approvers" in json.dumps(blocks)


def test_decided_plan_messages_lose_their_buttons_and_say_who_and_when() -> None:
    approved = Decision("approved", ["U0BOB", "U0CAROL"], "2026-11-23 07:01:02 UTC")
    text, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY, approved)
    assert buttons(blocks) == [] and "approved by U0BOB, U0CAROL" in text
    assert "Approved* by <@U0BOB>, <@U0CAROL> at 2026-11-23 07:01:02 UTC" in json.dumps(blocks)
    rejected = Decision("rejected", ["U0BOB"], "2026-11-23 07:01:02 UTC", reason="wrong pods")
    _, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY, rejected)
    assert buttons(blocks) == [] and "wrong pods" in json.dumps(blocks)
    pending = Decision("pending", ["U0BOB"], "2026-11-23 07:01:02 UTC", needs=1)
    _, blocks = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY, pending)
    assert len(buttons(blocks)) == 2 and "1 more approval(s) needed" in json.dumps(blocks)


def test_long_params_are_cut_for_phones() -> None:
    plan = {**PLAN, "steps": [{"action": "noop", "params": {"note": "x" * 500},
                               "timeout_s": 30, "retry": 0}]}
    _, blocks = plan_message(CASE, plan, PLAN_HASH, "ap_1", "U0ALICE", POLICY)
    steps = next(b["text"]["text"] for b in blocks if "*Steps*" in b.get("text", {}).get(
        "text", ""))
    assert len(steps) < 200 and "…" in steps


def test_reject_modal_asks_for_a_reason() -> None:
    modal = reject_modal("ap_1", '{"approval_id": "ap_1"}')
    assert modal["callback_id"] == View.REJECT_REASON
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
