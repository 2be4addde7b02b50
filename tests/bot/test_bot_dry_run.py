"""The approver sees the plan's dry run: its own section of the plan message, a line a step (what
it would do, what cannot run, what was not checked and why), above the buttons while the plan
waits and still there once it is decided; a proposal without a dry run shows none."""

from __future__ import annotations

import json

from sqlalchemy import Engine

from bot.blocks import PlanDecisionView, plan_message, with_dry_run
from core.domain.dry_run import DryRunLine, DryRunReport
from core.domain.policy import ApprovalPolicy
from tests.support.cases import PLAN, PLAN_HASH
from tests.support.slack import block_kit_problems, running_bot, to_the_gate

CASE = {"case_id": "0f0e0d0c-0000-4000-8000-000000000001", "title": "checkout 5xx",
        "status": "WAIT_GATE", "version": 3, "severity": "SEV2",
        "updated_at": "2026-11-23T07:00:00+00:00"}
POLICY = ApprovalPolicy(approvers=frozenset({"U0BOB", "U0CAROL"}))
REPORT = DryRunReport(PLAN_HASH, (
    DryRunLine("step 1 (k8s.rollout)", "ok", "would set container api of deployment "
               "payments/payments-api: registry.example.com/payments-api:v2.4.0 → "
               "registry.example.com/payments-api:v2.4.1"),
    DryRunLine("rollback step 1 (k8s.rollout)", "not_checked",
               "no Kubernetes API is configured to read it from (OPSGATE_KUBECONFIG)"),
))


def test_the_dry_run_is_its_own_section_above_the_buttons() -> None:
    message = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY)
    text, blocks = with_dry_run(message, REPORT)
    assert text == message[0] and block_kit_problems(blocks) == []
    kinds = [block["type"] for block in blocks]
    at = kinds.index("actions")
    shown = blocks[at - 1]["text"]["text"]
    assert blocks[:at - 1] == message[1][:at - 1]  # the plan message itself is untouched
    assert shown.splitlines() == [
        "*Dry run* (read when the plan was proposed)",
        "✅ step 1 (k8s.rollout): would set container api of deployment payments/payments-api: "
        "registry.example.com/payments-api:v2.4.0 → registry.example.com/payments-api:v2.4.1",
        "❔ rollback step 1 (k8s.rollout): not checked: no Kubernetes API is configured to read "
        "it from (OPSGATE_KUBECONFIG)"]


def test_a_decided_plan_keeps_its_dry_run_and_one_without_shows_none() -> None:
    decided = plan_message(CASE, PLAN, PLAN_HASH, "ap_1", "U0ALICE", POLICY,
                           PlanDecisionView("approved", ["U0BOB"], "2026-11-23 07:01:00 UTC"))
    _, blocks = with_dry_run(decided, REPORT)
    texts = [str(block.get("text", {}).get("text", "")) for block in blocks]
    at = next(n for n, text in enumerate(texts) if "*Dry run*" in text)
    actions = [n for n, block in enumerate(blocks) if block["type"] == "actions"]
    assert all(at < n for n in actions)  # above what is left of the buttons (Details)
    assert with_dry_run(decided, None) == decided


def test_the_plan_message_in_the_thread_shows_what_its_script_would_run(engine: Engine) -> None:
    with running_bot(engine) as bot:
        _, plan = to_the_gate(bot, "5.000100", "payments worker hung")
        shown = json.dumps(plan["blocks"], ensure_ascii=False)
        assert "*Dry run* (read when the plan was proposed)" in shown
        assert "✅ step 1 (script.exec): would run " in shown
        assert "restart-service --graceful --drain-seconds=30 (allow-list entry " \
               "'restart-service')" in shown
