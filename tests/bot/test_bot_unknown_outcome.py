"""A step whose outcome is unknown (its run finished after its lease) asks a person, so Slack's
quiet thread gets it: which target to check, with the plan's text escaped as mrkdwn; other step
results stay on the card only."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from bot.card import unknown_outcome_post
from bot.notifier import SlackNotifier
from core.domain.messages import Topic
from tests.support.plan_runs import make_app

CASE = "6f1c2a9e-0000-4000-8000-000000000001"


def step_result(refused: str | None, reason: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "case_id": CASE, "event": "step_result", "actor": "executor", "reason": reason,
        "phase": "step", "step": 0, "attempt": 1, "attempts_allowed": 1,
        "action": "script.exec", "ok": False, "duration_s": 0.0, "output": "", "plan_hash": "p"}
    if refused is not None:
        payload["refused"] = refused
    return payload


def test_an_unknown_outcome_names_the_target_in_the_thread_escaped(sqlite_engine: Engine) -> None:
    reason = ("step 1 (script.exec): outcome unknown — check what the command /opt/drain "
              "<@U0EVE> & co changes: the step finished after its lease ended")
    notifier = SlackNotifier(make_app(sqlite_engine))
    message = notifier.message(Topic.EXEC_STEP_RESULT, step_result("unknown_outcome", reason))
    assert message is not None
    text, blocks = message
    assert text.startswith("❓ Case `6f1c2a9e`: step 1 (script.exec): outcome unknown — check "
                           "what the command /opt/drain &lt;@U0EVE&gt; &amp; co changes")
    assert "<@U0EVE>" not in text and blocks is None
    assert "will not run the step again" in text


def test_other_step_results_stay_on_the_card(sqlite_engine: Engine) -> None:
    notifier = SlackNotifier(make_app(sqlite_engine))
    for refused in (None, "step_refused", "needs_reconciliation"):
        payload = step_result(refused, "step 1 (script.exec) failed")
        assert notifier.message(Topic.EXEC_STEP_RESULT, payload) is None
        assert unknown_outcome_post(payload) is None  # type: ignore[arg-type]
