"""Fail closed where the configuration leaves something out. With no approvers named, nobody
approves: a click is refused saying so, the plan message says so, and so does ``/readyz``. With
no Slack token, the notifier's posts are held — no ``chat.post`` is recorded as done — until a
process with Slack delivers each once. Every Slack write of the bot goes through the gateway:
a retried ``/case new`` starts one thread, a retried refusal is told once."""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, select

from bot.cli import slack_chat
from bot.ids import Action
from bot.notifier import SlackNotifier
from bot.settings import SlackSettings
from core.bootstrap import App, Extensions, bootstrap
from core.db.tables import dead_letter, tool_call_ledger
from core.domain.commands import OpenCase
from core.domain.messages import Topic
from core.domain.policy import NO_APPROVERS
from core.loop import InProcessLoop
from core.ops.readiness import readiness
from core.settings import Settings
from tests.support.metrics import STAND_IN_METRICS
from tests.support.slack import (
    APPROVER,
    CHANNEL,
    FORM,
    OUTSIDER,
    REQUESTER,
    FakeSlack,
    action_body,
    approval_of,
    command_body,
    fake_slack,
    running_bot,
    settings_for,
    to_the_gate,
)


def ephemerals(slack: FakeSlack, user: str) -> list[str]:
    return [str(e.get("text")) for e in slack.calls("chat.postEphemeral") if e["user"] == user]


def ledger(engine: Engine, *tools: str, actor: str | None = None) -> list[tuple[str, str]]:
    """(tool, state) of the gateway's ledger rows of ``tools`` (by ``actor``)."""
    query = select(tool_call_ledger.c.tool, tool_call_ledger.c.state).where(
        tool_call_ledger.c.tool.in_(tools))
    if actor is not None:
        query = query.where(tool_call_ledger.c.actor == actor)
    with engine.connect() as conn:
        return [(str(row.tool), str(row.state)) for row in conn.execute(query)]


# -- no approvers named ---------------------------------------------------------------------


def test_with_no_approvers_a_click_is_refused_and_the_plan_message_says_why(
        sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine, approvers=[]) as bot:
        case_id, plan = to_the_gate(bot, "31.000100")
        assert NO_APPROVERS in str(plan["blocks"])  # on the plan message, beside its buttons
        approval_id = approval_of(plan) or ""

        bot.click(Action.APPROVE, approval_id, user=APPROVER, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: bool(ephemerals(bot.slack, APPROVER)), what="the refusal")
        assert ephemerals(bot.slack, APPROVER) == [
            f"⛔ {NO_APPROVERS}: nobody may decide this plan until someone is named"]

        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"
        rows = [row for row in bot.app.cases.timeline(case_id)
                if row["event"] in ("plan_approval", "gate_approved")]
        assert [(r["actor"], r["meta"]["outcome"]) for r in rows] == [(APPROVER, "refused")]
        def waiting() -> list[str]:
            return [str(row["reason"]) for row in bot.app.cases.timeline(case_id)
                    if row["event"] == "awaiting_approval"]

        _wait(waiting, "the gatekeeper's note")
        assert NO_APPROVERS in waiting()[0]
        checks = readiness(bot.app)["checks"]
        assert checks["approvers"]["configured"] is False
        assert NO_APPROVERS in checks["approvers"]["warning"]


# -- no Slack token ---------------------------------------------------------------------------


def _app(engine: Engine, settings: Settings) -> App:
    extensions = Extensions(consumers={"notifier": SlackNotifier}, chat=slack_chat)
    return bootstrap(settings, engine=engine, extensions=extensions)


def _held_settings() -> Settings:
    return Settings(_env_file=None, redis_url=None, prometheus_url=None, approvers=[APPROVER],
                    loop_poll_s=0.05, static_metrics=STAND_IN_METRICS).with_layers(
        SlackSettings(slack_bot_token=None, slack_signing_secret=None, incident_channel=CHANNEL))


def _wait(done: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _held(engine: Engine, topic: str | None = None) -> list[str]:
    """The errors of the messages (of ``topic``) held for the notifier, not yet handed out
    again."""
    query = select(dead_letter.c.error).where(dead_letter.c.consumer == "notifier",
                                              dead_letter.c.requeued_at.is_(None))
    if topic is not None:
        query = query.where(dead_letter.c.topic == topic)
    with engine.connect() as conn:
        return [str(row[0]) for row in conn.execute(query)]


def test_without_slack_posts_are_held_then_delivered_once_slack_is_set_up(
        engine: Engine) -> None:
    app = _app(engine, _held_settings())
    with InProcessLoop(app):
        opened = app.cases.open_case(OpenCase(title="checkout returns 500s", actor=REQUESTER),
                                     "held-case")
        case_id = UUID(opened.data()["case_id"])
        _wait(lambda: _held(engine, Topic.PLAN_PROPOSED), "the plan message to be held")
        _wait(lambda: _held(engine, Topic.CASE_OPENED), "the card to be held")
        checks = readiness(app)["checks"]
    app.close()
    assert app.cases.get_case(case_id)["status"] == "WAIT_GATE"
    assert checks["slack"]["configured"] is False
    assert "Slack is not configured (SLACK_BOT_TOKEN)" in checks["slack"]["warning"]
    assert ledger(engine, "chat.post", "chat.update") == []  # nothing claimed as sent
    with engine.connect() as conn:  # held, never retried blind nor given up on
        letters = list(conn.execute(select(dead_letter.c.error, dead_letter.c.attempts)))
    assert letters and all(error.startswith("held: Slack is not configured (SLACK_BOT_TOKEN)")
                           and attempts == 1 for error, attempts in letters), letters

    with fake_slack() as slack:  # Slack is set up: the next process delivers what was held
        app = _app(engine, settings_for(slack))
        with InProcessLoop(app):
            slack.wait_for(lambda: any(approval_of(p) for p in slack.posts()),
                           what="the held plan message")
            assert _held(engine) == []  # every held message handed out again
            slack.wait_for(lambda: any(not p.get("thread_ts") for p in slack.posts()),
                           what="the held card")
        app.close()  # the loop stopped after the message in hand: nothing more is posted
        plans = [p for p in slack.posts() if approval_of(p)]
        cards = [p for p in slack.posts() if not p.get("thread_ts")]  # a thread's first
        assert len(plans) == 1 and len(cards) == 1, slack.texts()
        assert readiness(app)["checks"]["slack"] == {"ok": True, "configured": True}
    done = [tool for tool, state in ledger(engine, "chat.post") if state == "done"]
    assert len(done) == 2  # the card and the plan message, each once


# -- every Slack write through the gateway ----------------------------------------------------


def test_a_retried_case_new_command_starts_one_thread(sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine) as bot:
        body = command_body("new payments queue is stuck")  # one trigger id, sent twice
        assert bot.send(body, FORM).status_code == 200
        assert bot.send(body, FORM).status_code == 200
        bot.slack.wait_for(lambda: bool(bot.slack.calls("chat.update")), what="the update")
    roots = [p for p in bot.slack.posts() if str(p.get("text")).startswith("🚨")]
    assert len(roots) == 1, bot.slack.texts()
    named = [u for u in bot.slack.calls("chat.update") if u.get("ts") == roots[0]["ts"]]
    assert len(named) == 1 and "updates follow in this thread" in named[0]["text"]
    assert sorted(ledger(bot.app.engine, "chat.post", "chat.update", actor="slack-bot")) == [
        ("chat.post", "done"), ("chat.update", "done")]


def test_a_refusal_told_again_is_posted_once_through_the_gateway(sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine) as bot:
        _case_id, plan = to_the_gate(bot, "32.000100")
        body = action_body(Action.APPROVE, approval_of(plan) or "", user=OUTSIDER,
                           message_ts=plan["ts"])  # one click, delivered twice
        bot.send(body, FORM)
        bot.send(body, FORM)
        bot.slack.wait_for(lambda: bool(ephemerals(bot.slack, OUTSIDER)), what="the refusal")
    told = ephemerals(bot.slack, OUTSIDER)
    assert len(told) == 1 and "not an approver" in told[0]
    assert ledger(bot.app.engine, "chat.postEphemeral") == [("chat.postEphemeral", "done")]
