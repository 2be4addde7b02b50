"""The full story through Slack: a mention opens a case in its thread, the plan message arrives
with Approve/Reject, an approver decides, and the thread tells how it ended (CLOSED or PARKED)."""

from __future__ import annotations

import json

from sqlalchemy import Engine, select

from bot.ids import Action
from core.db.tables import tool_call_ledger
from core.domain.commands import OpenCase
from tests.support.slack import (
    APPROVER,
    FORM,
    REQUESTER,
    ScriptedAgent,
    approval_of,
    reason_body,
    running_bot,
)


def test_mention_plan_approve_closes_the_case(engine: Engine) -> None:
    with running_bot(engine) as bot:
        answer = bot.mention("<@U0BOT> checkout returns 500s", event_id="Ev1", ts="1.000100")
        assert answer.status_code == 200
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        plan = bot.plan_messages()[0]
        assert plan["channel"] == "C0INCIDENT" and plan["thread_ts"] == "1.000100"
        case_id = bot.case_of_thread("1.000100")
        assert case_id is not None
        labels = [e["text"]["text"] for b in plan["blocks"] if b["type"] == "actions"
                  for e in b["elements"]]
        assert labels == ["Approve", "Reject", "Details"]
        shown = json.dumps(plan["blocks"], ensure_ascii=False)
        for part in ("Risk", "Steps", "Rollback", "Verify"):
            assert part in shown
        # the stand-in reads http_5xx_ratio 0.001 before any change: the check holds already
        assert "⚠️ *holds already*: http_5xx_ratio = 0.001 now, below 0.01 (stand-in) — it " \
               "cannot show that the change worked" in shown
        assert "1. Change nothing" in shown and '\\"action\\"' not in shown

        clicked = bot.click(Action.APPROVE, approval_of(plan) or "", user=APPROVER,
                            message_ts=plan["ts"], thread_ts="1.000100")
        assert clicked.status_code == 200
        bot.slack.wait_for(lambda: any("CLOSED" in t for t in bot.slack.texts()),
                           what="CLOSED in the thread")
        assert bot.app.cases.get_case(case_id)["status"] == "CLOSED"
        updates = bot.slack.calls("chat.update")
        decided = [u for u in updates if u.get("ts") == plan["ts"]]
        assert decided, "the plan message is updated in place"
        last = json.dumps(decided[-1]["blocks"])
        assert "Approved" in last and APPROVER in last and "plan_approve" not in last
        # every post of the case went to its thread
        assert all(p.get("thread_ts") == "1.000100" for p in bot.slack.posts())


def test_mention_plan_reject_parks_the_case(engine: Engine) -> None:
    with running_bot(engine) as bot:
        bot.mention("<@U0BOT> payments latency is high", event_id="Ev2", ts="2.000100")
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        plan = bot.plan_messages()[0]
        approval_id = approval_of(plan) or ""
        bot.click(Action.REJECT, approval_id, user=APPROVER, message_ts=plan["ts"],
                  thread_ts="2.000100")
        bot.slack.wait_for(lambda: bool(bot.slack.calls("views.open")), what="the modal")
        view = bot.slack.calls("views.open")[0]["view"]
        assert view["callback_id"] == "plan_reject_reason"
        submitted = bot.send(reason_body(view["private_metadata"], "wrong region", user=APPROVER),
                             FORM)
        assert submitted.status_code == 200 and submitted.text == ""
        bot.slack.wait_for(lambda: any("PARKED" in t or "rejected" in t
                                       for t in bot.slack.texts()), what="the rejection")
        case_id = bot.case_of_thread("2.000100")
        assert case_id is not None
        assert bot.app.cases.get_case(case_id)["status"] == "PARKED"
        bot.slack.wait_for(lambda: any(u.get("ts") == plan["ts"]
                                       for u in bot.slack.calls("chat.update")),
                           what="the plan message update")
        last = json.dumps([u for u in bot.slack.calls("chat.update")
                           if u.get("ts") == plan["ts"]][-1]["blocks"])
        assert "Rejected" in last and "wrong region" in last and "plan_reject" not in last
        assert REQUESTER != APPROVER


def test_the_story_with_the_real_agent(pg_engine: Engine) -> None:
    """The agent package (offline planner model) converses in the thread and plans; the bot's
    buttons decide its plan like any other."""
    with running_bot(pg_engine, real_agent=True) as bot:
        bot.mention("<@U0BOT> checkout 5xx are up since 10:02, please look",
                    event_id="EvAgent", ts="3.000100")
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), timeout_s=60,
                           what="the agent's plan message")
        case_id = bot.case_of_thread("3.000100")
        assert case_id is not None
        # The agent's closing reply is posted when its run ends, which may be just after the
        # plan it proposed reaches the thread.
        def replies() -> list[dict]:
            return [p for p in bot.slack.posts() if p.get("thread_ts") == "3.000100"]
        bot.slack.wait_for(lambda: len(replies()) >= 3, timeout_s=30, what="the agent's reply")
        assert len(replies()) >= 3  # the agent's reply, the case's facts, the plan
        plan = bot.plan_messages()[0]
        bot.click(Action.APPROVE, approval_of(plan) or "", user=APPROVER, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: bot.app.cases.get_case(case_id)["status"]
                           in ("CLOSED", "PARKED"), timeout_s=60, what="the end of the case")
        timeline = [row["event"] for row in bot.app.cases.timeline(case_id)]
        assert "gate_approved" in timeline and timeline.count("gate_approved") == 1
        # One correlation id, the Slack event's, from the mention through the bot's and the
        # agent's gateway calls to the consumers' (issue 8).
        with pg_engine.connect() as conn:
            traced = {row.tool for row in conn.execute(
                select(tool_call_ledger.c.tool).where(
                    tool_call_ledger.c.correlation_id == "EvAgent"))}
        assert {"case.open", "slack.reply", "propose_plan", "analysis.gather",
                "chat.post"} <= traced, traced


def test_a_case_opened_elsewhere_gets_a_thread_in_the_incident_channel(
        sqlite_engine: Engine) -> None:
    agent = ScriptedAgent()
    with running_bot(sqlite_engine, agent=agent) as bot:
        opened = bot.app.cases.open_case(OpenCase("Alert: disk 95% on db-2", actor="alertmanager"),
                                         "alert-1").data()
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        root = bot.slack.posts()[0]
        assert root["channel"] == "C0INCIDENT" and "thread_ts" not in root
        assert all(p.get("thread_ts") == root["ts"] for p in bot.slack.posts()[1:])
        assert str(bot.case_of_thread(root["ts"])) == opened["case_id"]
        # someone answers in that thread: the agent continues the same case
        bot.mention("is it the WAL?", event_id="EvThread", ts="4.000200", thread_ts=root["ts"],
                    kind="message")
        bot.slack.wait_for(lambda: len(agent.runs) == 1, what="the agent's run")
        assert str(agent.runs[0][0]) == opened["case_id"]
