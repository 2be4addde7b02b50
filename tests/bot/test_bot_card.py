"""The case card, kept current from the case's state on both databases: posted once, updated at
each stage (what is happening, the plan at the gate with the quorum, steps with durations,
verification's live reading and deadline, the outcome), never regressed by a late event or by
renders racing each other; within Slack's Block Kit limits for a plan of 20 steps."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from agent.graph import RunUsage
from bot.blocks import plan_message
from bot.card import card_message, catchup_message
from bot.card_keeper import CardKeeper
from bot.card_state import CaseState
from bot.notifier import SlackNotifier
from core.api.statuses import reply_status
from core.bootstrap import App
from core.cases.progress import current_plan, progress_of
from core.chat import ChatMessage, RecordingSink
from core.domain.commands import NoteCase
from core.domain.messages import Topic
from core.domain.policy import ApprovalPolicy
from core.messaging.consumer import Delivery
from core.messaging.envelope import Envelope
from tests.support.cases import APPROVER, PLAN, PLAN_HASH, E, command, key, open_case
from tests.support.slack import block_kit_problems, fake_slack

ORDER = ["NEW", "ANALYZING", "PLANNING", "WAIT_GATE", "EXECUTING", "VERIFYING", "CLOSED"]


def sink(app: App) -> RecordingSink:
    assert isinstance(app.chat, RecordingSink)
    return app.chat


def shown(message: ChatMessage) -> str:
    """A card as one text: every block's text, in order."""
    parts = []
    for block in message.blocks or []:
        text = block.get("text")
        parts.append(text["text"] if isinstance(text, dict) else
                     " ".join(e["text"] for e in block.get("elements") or []))
    return "\n".join(parts)


def status_of(message: ChatMessage) -> str:
    return str((message.blocks or [{}])[0]["text"]["text"]).split(" ")[1]


def move(app: App, case_id: UUID, event: E, **overrides: Any) -> None:
    reply = app.cases.transition(command(case_id, event, **overrides), key())
    assert reply_status(reply) == 200, reply.body


def note(app: App, case_id: UUID, event: str, reason: str, **meta: Any) -> None:
    app.cases.note(NoteCase(case_id, event, "tester", reason=reason, meta=meta), key()).data()


def test_the_card_is_posted_once_and_updated_at_each_stage(app: App) -> None:
    keeper, chat = CardKeeper(app), sink(app)
    case_id = open_case(app.cases, "checkout 5xx")
    keeper.post(case_id)
    keeper.post(case_id)  # the opening fact delivered again: still one card
    [card] = chat.posts
    assert card.text.startswith("🆕 Case") and "the analysis is under way" in shown(card)

    def stage(*wanted: str) -> str:
        before = len(chat.updates)
        keeper.refresh(case_id)
        assert len(chat.updates) == before + 1, "one update per stage"
        latest = chat.updates[-1]
        assert latest.ts == card.ts
        text = shown(latest)
        for part in wanted:
            assert part in text, (part, text)
        return text

    move(app, case_id, E.START_ANALYSIS)
    stage("🔎 ANALYZING · SEV3 · checkout 5xx")
    move(app, case_id, E.ANALYSIS_DONE, reason="5xx ratio up 9x since 10:02")
    stage("📝 PLANNING", "• 5xx ratio up 9x since 10:02")
    note(app, case_id, "analysis_findings", "1 finding",
         findings=[{"summary": "http_5xx_ratio 9% vs 0.2% before", "confidence": 0.97,
                    "metric": "http_5xx_ratio"}])
    stage("• http_5xx_ratio 9% vs 0.2% before _(97%)_")
    move(app, case_id, E.PLAN_READY)
    stage("⏸️ WAIT_GATE", f"*Plan* {PLAN['title']}", "approvals 0 of 1",
          "requested by sre@example", "· 1. Change nothing")
    move(app, case_id, E.GATE_APPROVED)
    stage("⚙️ EXECUTING", f"✅ Approved by {APPROVER}", "▶ 1. Change nothing running…")
    note(app, case_id, "step_result", "step 1 (noop): noop: observe only", phase="step",
         step=0, attempt=1, attempts_allowed=1, ok=True, duration_s=0.25, action="noop",
         plan_hash=PLAN_HASH)
    stage("✓ 1. Change nothing — done · 0.2 s")  # each step with its target and result
    move(app, case_id, E.EXEC_DONE)
    stage("🧪 VERIFYING", "The first reading is due")
    deadline = datetime(2026, 11, 23, 7, 5, tzinfo=UTC)
    note(app, case_id, "verify_reading", "error_rate 0.03 is not below 0.01",
         state="pending", observed=0.03, reading=1, plan_hash=PLAN_HASH,
         waiting_for="error_rate below 0.01", deadline=deadline.isoformat(),
         next_reading_at=(deadline - timedelta(minutes=4)).isoformat())
    stage("🧪 Waiting for error_rate below 0.01 (now 0.03)", "Reading 1 at",
          f"next reading <!date^{int((deadline - timedelta(minutes=4)).timestamp())}"
          "^{time_secs}|07:01:00 UTC> · *deadline* "
          f"<!date^{int(deadline.timestamp())}^{{time_secs}}|07:05:00 UTC>")  # one format
    note(app, case_id, "verify_result", "error_rate 0.004 < 0.01", passed=True,
         state="held", observed=0.004, reading=2, plan_hash=PLAN_HASH)
    move(app, case_id, E.VERIFY_PASS, actor="verifier", reason="the check passed")
    closed = stage("✅ CLOSED", "✅ Held: error_rate 0.004 &lt; 0.01",  # escaped for mrkdwn
                   "✅ *CLOSED* at", "(verified by verifier) — the check passed")
    assert "running…" not in closed and "first reading" not in closed

    # A late event changes nothing: the card is rendered from the case, not from the event.
    notifier = SlackNotifier(app)
    late = Envelope(message_id=10**9, topic=Topic.EXEC_STEP_RESULT, key=str(case_id),
                    payload={"case_id": str(case_id), "ok": True, "reason": "step 1"})
    notifier.handle(Delivery("notifier", late))
    assert status_of(chat.updates[-1]) == "CLOSED" and len(chat.posts) == 1


def test_renders_racing_each_other_end_on_the_last_state(app: App) -> None:
    """Eight renderers refresh after every move while the case runs to CLOSED: the updates
    never go back a stage, and the last one shows the case as it ended."""
    keeper, chat = CardKeeper(app), sink(app)
    case_id = open_case(app.cases)
    keeper.post(case_id)
    failures: list[BaseException] = []

    def refresh() -> None:
        try:
            keeper.refresh(case_id)
        except BaseException as failed:  # reported by the assertion below
            failures.append(failed)

    for event in (E.START_ANALYSIS, E.ANALYSIS_DONE, E.PLAN_READY, E.GATE_APPROVED,
                  E.EXEC_DONE, E.VERIFY_PASS):
        move(app, case_id, event)
        threads = [threading.Thread(target=refresh) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert failures == []
    statuses = [status_of(update) for update in chat.updates]
    assert [ORDER.index(s) for s in statuses] == sorted(ORDER.index(s) for s in statuses)
    assert statuses[-1] == "CLOSED"
    final = card_message(keeper.state(case_id, keeper.store.card(case_id)))
    assert chat.updates[-1].blocks == final[1]
    card = keeper.store.card(case_id)
    assert card is not None and card.owner is None and not card.dirty


# -- Block Kit limits --------------------------------------------------------------------------


def twenty_step_state() -> CaseState:
    steps = [{"action": "http.request", "timeout_s": 30, "retry": 2,
              "params": {"url": f"https://ops.example/step/{n}", "body": "x" * 400}}
             for n in range(20)]
    plan = {**PLAN, "title": "T" * 400, "steps": steps}
    at = "2026-11-23T07:00:00+00:00"
    rows: list[dict[str, Any]] = [
        {"event": "case_opened", "actor": "U0ALICE", "reason": None, "created_at": at,
         "meta": {"outcome": "opened", "to": "NEW", "version": 0}},
        {"event": "plan_ready", "actor": "planner", "reason": None, "created_at": at,
         "meta": {"outcome": "accepted", "from": "PLANNING", "to": "WAIT_GATE",
                  "plan_hash": "h" * 64}},
        {"event": "gate_approved", "actor": "U0BOB", "reason": None, "created_at": at,
         "meta": {"outcome": "accepted", "from": "WAIT_GATE", "to": "EXECUTING",
                  "plan_hash": "h" * 64, "context": {"approvers": ["U0BOB"]}}},
    ]
    rows += [{"event": "step_result", "actor": "executor", "created_at": at,
              "reason": f"step {n + 1} (http.request): " + "answered 200 OK " * 40,
              "meta": {"outcome": "note", "context": {
                  "phase": "step", "step": n, "attempt": 1, "attempts_allowed": 3, "ok": True,
                  "duration_s": 1.5, "plan_hash": "h" * 64}}} for n in range(20)]
    rows += [{"event": "message_pinned", "actor": "U0CAROL", "created_at": at,
              "reason": "y" * 2000, "meta": {"outcome": "note", "context": {
                  "author": "U0DAN", "permalink": "https://t.slack.com/archives/C1/p1"}}}
             for _ in range(9)]
    return CaseState(progress_of({"case_id": str(UUID(int=1)), "title": "Z" * 500,
                                  "severity": "SEV1"},
                                 rows, {"plan_hash": "h" * 64, "plan": plan,
                                        "proposed_by": "U0ALICE"}),
                     needs=2, approvers="U0BOB, U0CAROL", working="w" * 500)


def test_a_card_for_a_plan_of_20_steps_stays_within_block_kit_limits() -> None:
    state = twenty_step_state()
    plan = state.progress.plan
    assert plan is not None
    text, blocks = card_message(state)
    assert block_kit_problems(blocks) == []
    assert len(blocks) <= 12 and len(text) < 300
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    assert all(len(t) <= 3000 for t in sections)
    steps = next(b["text"]["text"] for b in blocks if b["block_id"] == "case_card_steps")
    assert steps.count("✓ step") == 20 and "more" not in steps
    longer = {"plan_hash": plan.plan_hash, "proposed_by": plan.proposed_by,
              "plan": {**plan.plan, "steps": [plan.plan["steps"][0]] * 200}}
    assert block_kit_problems(card_message(CaseState(  # a longer plan is cut at a whole line
        replace(state.progress, plan=current_plan(longer))))[1]) == []
    # Slack also refuses a message whose blocks are very long in all (msg_blocks_too_long,
    # about 13,000 characters though undocumented): the card keeps far below.
    assert len(json.dumps(blocks, ensure_ascii=False)) < 12_000
    # the plan message of the same plan, too
    policy = ApprovalPolicy(approvers=frozenset({"U0BOB"}))
    _, plan_blocks = plan_message({"case_id": str(UUID(int=1)), "title": "Z", "version": 3},
                                  dict(plan.plan), "h" * 64, "ap_1", "U0ALICE", policy)
    assert block_kit_problems(plan_blocks) == []


def test_the_fake_slack_refuses_blocks_beyond_slack_limits() -> None:
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "ok"}}
    with fake_slack() as slack:
        client = WebClient(token="xoxb-test", base_url=slack.api_url)
        client.chat_postMessage(channel="C1", text="fine", blocks=[section] * 50)
        for blocks, where in (
                ([section] * 51, "/blocks]"),
                ([{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}],
                 "/blocks/0/text/text"),
                ([{"type": "header", "text": {"type": "plain_text", "text": "x" * 151}}],
                 "/blocks/0/text/text"),
                ([{"type": "context", "elements": [{"type": "mrkdwn", "text": "x"}] * 11}],
                 "/blocks/0/elements")):
            with pytest.raises(SlackApiError) as refused:
                client.chat_update(channel="C1", ts="1.1", text="too much", blocks=blocks)
            assert refused.value.response["error"] == "invalid_blocks"
            assert where in refused.value.response["errors"][0]
        assert len(slack.posts()) == 1


def test_catchup_shows_the_agents_token_count_as_words_not_strikethrough(app: App) -> None:
    """The agent's estimated usage, on the timeline, read back by ``/case catchup``: no ``~``
    pair for Slack to draw as strikethrough."""
    case_id = open_case(app.cases, "checkout 5xx")
    usage = RunUsage(model_calls=1, tokens_in=58971, tokens_out=648, estimated=True)
    note(app, case_id, "agent_usage", f"1 model call(s), {usage.tokens_said()}")
    _text, blocks = catchup_message(CardKeeper(app).state(case_id))
    said = json.dumps(blocks)
    assert "about 58971 tokens in, about 648 tokens out (estimated)" in said
    assert "~" not in said
