"""The plan buttons: only the right people decide, each refusal says why (ephemerally) and leaves
only an audit line; stale buttons are refused; double and simultaneous clicks make one decision;
risky plans need two distinct approvers."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, func, select

from bot.ids import Action
from core.db.tables import inbox, outbox
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent
from core.domain.messages import Topic
from tests.support.slack import (
    APPROVER,
    OUTSIDER,
    REQUESTER,
    SECOND,
    Stack,
    approval_of,
    running_bot,
)


def open_and_wait_for_plan(bot: Stack, ts: str, text: str = "<@U0BOT> checkout errors",
                           **mention: Any) -> tuple[UUID, dict[str, Any], str]:
    bot.mention(text, event_id=f"Ev{ts}", ts=ts, **mention)
    bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
    plan = bot.plan_messages()[-1]
    case_id = bot.case_of_thread(ts)
    assert case_id is not None
    return case_id, plan, approval_of(plan) or ""


def ephemerals_to(bot: Stack, user: str) -> list[str]:
    return [str(e.get("text")) for e in bot.slack.calls("chat.postEphemeral")
            if e.get("user") == user]


def wait_ephemeral(bot: Stack, user: str, count: int = 1) -> list[str]:
    bot.slack.wait_for(lambda: len(ephemerals_to(bot, user)) >= count,
                       what=f"an ephemeral message to {user}")
    return ephemerals_to(bot, user)


def gate_rows(bot: Stack, case_id: UUID) -> list[dict[str, Any]]:
    return [row for row in bot.app.cases.timeline(case_id)
            if row["event"] in ("plan_approval", "gate_approved", "gate_rejected")]


def test_refusals_say_why_and_record_only_an_audit_line(pg_engine: Engine) -> None:
    with running_bot(pg_engine) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "20.000100")
        version = bot.app.cases.get_case(case_id)["version"]
        assert "approvers: <@U0BOB>, <@U0CAROL>" in json.dumps(plan["blocks"])  # Slack names
        assert "U0BOB" not in json.dumps(plan["blocks"]).replace("<@U0BOB>", "")  # no raw id

        bot.click(Action.APPROVE, approval_id, user=OUTSIDER, message_ts=plan["ts"])
        # people as mentions (Slack shows each reader the name), never as raw ids
        assert "⛔ <@U0MALLORY> is not an approver (<@U0BOB>, <@U0CAROL> may approve)" in \
            wait_ephemeral(bot, OUTSIDER)[0]
        bot.click(Action.APPROVE, approval_id, user=REQUESTER, message_ts=plan["ts"])
        assert "<@U0ALICE> requested this plan and cannot approve it" in \
            wait_ephemeral(bot, REQUESTER)[0]
        bot.click(Action.REJECT, approval_id, user=OUTSIDER, message_ts=plan["ts"])
        assert "not an approver" in wait_ephemeral(bot, OUTSIDER, 2)[1]
        bot.click(Action.APPROVE, "ap_forged", user=APPROVER, message_ts=plan["ts"])
        assert "no plan opsgate knows" in wait_ephemeral(bot, APPROVER)[0]

        case = bot.app.cases.get_case(case_id)
        assert (case["status"], case["version"]) == ("WAIT_GATE", version)
        rows = gate_rows(bot, case_id)
        assert [r["meta"]["outcome"] for r in rows] == ["refused", "refused", "refused"]
        assert [r["actor"] for r in rows] == [OUTSIDER, REQUESTER, OUTSIDER]
        assert bot.slack.calls("views.open") == []  # no reason asked of who may not reject
        for user in (OUTSIDER, REQUESTER, APPROVER):  # ephemeral: in the case's thread, to one
            assert all(e["channel"] == "C0INCIDENT" for e in bot.slack.calls(
                "chat.postEphemeral") if e["user"] == user)


def test_clicks_after_the_decision_and_on_a_superseded_plan_are_refused(
        pg_engine: Engine) -> None:
    with running_bot(pg_engine) as bot:
        case_id, plan, old_approval = open_and_wait_for_plan(bot, "21.000100")
        bot.click(Action.REJECT, old_approval, user=APPROVER, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: bool(bot.slack.calls("views.open")), what="the modal")
        view = bot.slack.calls("views.open")[0]["view"]
        from tests.support.slack import FORM, reason_body

        empty = bot.send(reason_body(view["private_metadata"], "  ", user=APPROVER), FORM)
        assert empty.json()["response_action"] == "errors"
        assert "needs a reason" in json.dumps(empty.json()["errors"])
        done = bot.send(reason_body(view["private_metadata"], "wrong runbook", user=APPROVER),
                        FORM)
        assert done.status_code == 200 and done.text == ""
        again = bot.send(reason_body(view["private_metadata"], "still wrong", user=SECOND), FORM)
        assert "already decided" in json.dumps(again.json()["errors"])

        bot.click(Action.APPROVE, old_approval, user=SECOND, message_ts=plan["ts"])
        assert "already decided" in wait_ephemeral(bot, SECOND)[0]

        # Resume: a new proposal (never the rejected plan: issue 41) gets a new message; the old
        # message's buttons stay refused.
        case = bot.app.cases.get_case(case_id)
        bot.app.cases.transition(TransitionCase(case_id, CaseEvent.RESUME, actor=REQUESTER,
                                                expected_version=case["version"]), "resume-1")
        bot.slack.wait_for(lambda: len(bot.plan_messages()) == 2, what="the second plan")
        new_approval = approval_of(bot.plan_messages()[-1])
        assert new_approval != old_approval
        bot.click(Action.APPROVE, old_approval, user=SECOND, message_ts=plan["ts"])
        refused = wait_ephemeral(bot, SECOND, 2)[1]
        assert "outdated view" in refused or "older plan" in refused
        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"


def test_double_and_simultaneous_clicks_make_one_decision(pg_engine: Engine) -> None:
    with running_bot(pg_engine) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "22.000100")
        clicks = [(APPROVER, Action.APPROVE)] * 3 + [(SECOND, Action.APPROVE)] * 2
        with ThreadPoolExecutor(len(clicks)) as pool:
            statuses = list(pool.map(lambda c: bot.click(c[1], approval_id, user=c[0],
                                                         message_ts=plan["ts"]).status_code,
                                     clicks))
        assert statuses == [200] * len(clicks)
        bot.slack.wait_for(lambda: any("CLOSED" in t for t in bot.slack.texts()),
                           what="CLOSED")
        time.sleep(0.5)
        decided = [r for r in gate_rows(bot, case_id) if r["event"] == "gate_approved"]
        assert len(decided) == 1
        executions = [r for r in bot.app.cases.timeline(case_id) if r["event"] == "exec_done"]
        assert len(executions) == 1
        winner = decided[0]["actor"]
        loser = SECOND if winner == APPROVER else APPROVER
        # every click after the decision is told it was already decided, nothing else
        later = sum(1 for user, _ in clicks if user == loser)
        told = wait_ephemeral(bot, loser, later)
        assert len(told) == later and all("already decided" in t for t in told)
        assert all("already decided" in t for t in ephemerals_to(bot, winner))


def test_a_risky_plan_needs_two_distinct_approvers(engine: Engine) -> None:
    with running_bot(engine, two_person_risk=0.0) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "23.000100")
        assert "Approve a high-risk plan?" in json.dumps(plan["blocks"])  # Slack asks first
        bot.click(Action.APPROVE, approval_id, user=APPROVER, message_ts=plan["ts"])
        assert "1 more approval(s) needed" in wait_ephemeral(bot, APPROVER)[0]
        bot.slack.wait_for(lambda: any(u.get("ts") == plan["ts"]
                                       for u in bot.slack.calls("chat.update")),
                           what="the pending update")
        pending = json.dumps(bot.slack.updates_of(plan["ts"])[-1]["blocks"],
                             ensure_ascii=False)
        assert "1 of 2: <@U0BOB>" in pending  # the quorum's progress, on the plan in place
        assert "1 more approval" in pending and "plan_approve" in pending  # buttons stay
        card = next(p for p in bot.slack.posts() if p["text"].startswith("🔎 Case"))
        bot.slack.wait_for(lambda: any("approvals 1 of 2: <@U0BOB>" in json.dumps(
            u["blocks"], ensure_ascii=False) for u in bot.slack.updates_of(card["ts"])),
                           what="the quorum's progress on the card")
        bot.click(Action.APPROVE, approval_id, user=APPROVER, message_ts=plan["ts"])  # again
        assert "already recorded" in wait_ephemeral(bot, APPROVER, 2)[1]
        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"
        bot.click(Action.APPROVE, approval_id, user=SECOND, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: any("CLOSED" in t for t in bot.slack.texts()),
                           what="CLOSED")
        last = json.dumps([u for u in bot.slack.calls("chat.update")
                           if u.get("ts") == plan["ts"]][-1]["blocks"])
        assert APPROVER in last and SECOND in last and "plan_approve" not in last


def test_approvers_by_user_group(sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine, approvers=["S0ONCALL"]) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "24.000100")
        bot.click(Action.APPROVE, approval_id, user=SECOND, message_ts=plan["ts"])
        # the group and the person as mentions: Slack shows the handle and the name
        assert "<@U0CAROL> is not an approver (<!subteam^S0ONCALL> may approve)" in \
            wait_ephemeral(bot, SECOND)[0]
        bot.click(Action.APPROVE, approval_id, user=APPROVER, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: any("CLOSED" in t for t in bot.slack.texts()),
                           what="CLOSED")
        assert bot.app.cases.get_case(case_id)["status"] == "CLOSED"
        groups = bot.slack.calls("usergroups.users.list")
        assert groups and groups[0]["usergroup"] == "S0ONCALL"


def test_a_plan_nobody_decides_expires_and_its_buttons_give_way(engine: Engine) -> None:
    with running_bot(engine, approval_ttl_s=1) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "25.000100")
        bot.slack.wait_for(lambda: bot.app.cases.get_case(case_id)["status"] == "PARKED",
                           what="the expiry")
        expired = [r for r in bot.app.cases.timeline(case_id) if r["event"] == "gate_expired"]
        assert [(r["actor"], r["reason"]) for r in expired] == [
            ("gatekeeper", "approval expired after 1 s")]
        bot.slack.wait_for(lambda: any("Approval expired" in json.dumps(
            u["blocks"], ensure_ascii=False) for u in bot.slack.updates_of(plan["ts"])),
                           what="the plan message's update")
        last = json.dumps(bot.slack.updates_of(plan["ts"])[-1]["blocks"], ensure_ascii=False)
        assert "⌛ *Approval expired after 1 s* — ask the agent for a fresh plan" in last
        assert "plan_approve" not in last and "plan_reject" not in last
        bot.slack.wait_for(lambda: any("is PARKED: nobody decided the plan in time" in t
                                       for t in bot.slack.texts()), what="PARKED")

        bot.click(Action.APPROVE, approval_id, user=APPROVER, message_ts=plan["ts"])
        told = wait_ephemeral(bot, APPROVER)[0]
        assert "approval expired after 1 s — ask the agent for a fresh plan" in told
        bot.click(Action.REJECT, approval_id, user=SECOND, message_ts=plan["ts"])
        assert "approval expired" in wait_ephemeral(bot, SECOND)[0]
        assert bot.slack.calls("views.open") == []  # no reason asked for an expired plan
        assert gate_rows(bot, case_id) == []  # the late clicks wrote nothing
        assert bot.app.cases.get_case(case_id)["status"] == "PARKED"


def test_a_decision_before_the_ttl_leaves_the_plan_decided(sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine, approval_ttl_s=2) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "26.000100")
        # The plan message can come before the gatekeeper's note that schedules the expiry
        # check; a click before that note leaves no check to test.
        checks = lambda: [r for r in bot.app.cases.timeline(case_id)  # noqa: E731
                          if r["event"] == "awaiting_approval"]
        bot.slack.wait_for(lambda: bool(checks()), what="the gatekeeper's awaiting_approval")
        bot.click(Action.APPROVE, approval_id, user=APPROVER, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: any("CLOSED" in t for t in bot.slack.texts()),
                           what="CLOSED")
        gate = bot.app.cases.get_case(case_id)
        due = datetime.fromisoformat(checks()[0]["meta"]["context"]["expires_at"])
        bot.slack.wait_for(lambda: datetime.now(UTC) > due + timedelta(seconds=0.5),
                           what="the expiry check's time")
        bot.slack.wait_for(lambda: inbox_has(bot, "gatekeeper", Topic.GATE_EXPIRE),
                           what="the expiry check, delivered")
        assert bot.app.cases.get_case(case_id)["version"] == gate["version"]
        assert "gate_expired" not in [r["event"] for r in bot.app.cases.timeline(case_id)]
        assert "Approved* by <@U0BOB>" in json.dumps(bot.slack.updates_of(plan["ts"])[-1])


def inbox_has(bot: Stack, consumer: str, topic: str) -> bool:
    """Whether ``consumer`` took a message of ``topic``."""
    with bot.app.engine.connect() as conn:
        query = (select(func.count()).select_from(inbox.join(outbox,
                                                             inbox.c.message_id == outbox.c.id))
                 .where(inbox.c.consumer == consumer, outbox.c.topic == topic))
        return bool(conn.execute(query).scalar())
