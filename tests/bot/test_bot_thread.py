"""The incident thread people want to read, through Slack: a case that runs to CLOSED leaves its
card, the plan with its buttons, CLOSED and the agent's own reply — nothing else — while the card
follows every stage in place; the thread shows the agent working; ``/case catchup`` tells a
latecomer where the case stands, at the gate and once closed."""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, select

from bot.ids import Action
from core.db.tables import dead_letter, inbox, outbox
from core.domain.commands import OpenCase
from core.domain.messages import Topic
from tests.support.slack import (
    APPROVER,
    ScriptedAgent,
    Stack,
    approval_of,
    block_kit_problems,
    card_of,
    running_bot,
    texts,
    to_the_gate,
)

ORDER = ["NEW", "ANALYZING", "PLANNING", "WAIT_GATE", "EXECUTING", "VERIFYING", "CLOSED"]
POSTS_BEFORE = 11
"""Thread posts of this story before the card (measured on b01ccfc, the commit before it): the
agent's reply, "Case opened", three transitions, the plan, "waiting for approval", "approved",
the step, "Verifying … waiting for", "VERIFYING → CLOSED"."""


def status(update: dict[str, Any]) -> str:
    return texts(update).split(" ")[1]


def approve_and_close(bot: Stack, case_id: UUID, plan: dict[str, Any]) -> None:
    bot.click(Action.APPROVE, approval_of(plan) or "", user=APPROVER, message_ts=plan["ts"],
              thread_ts=plan["thread_ts"])
    bot.slack.wait_for(lambda: bot.app.cases.get_case(case_id)["status"] == "CLOSED",
                       what="the case to close")
    bot.slack.wait_for(lambda: any("CLOSED" in str(p["text"]) for p in bot.slack.posts()),
                       what="CLOSED in the thread")


def test_a_closed_case_leaves_four_posts_and_a_card_that_followed_every_stage(
        engine: Engine) -> None:
    with running_bot(engine) as bot:
        case_id, plan = to_the_gate(bot, "1.000100")
        approve_and_close(bot, case_id, plan)
        card = card_of(bot.slack)
        bot.slack.wait_for(lambda: status(bot.slack.updates_of(card["ts"])[-1]) == "CLOSED",
                           what="the card to say CLOSED")

        thread = [p for p in bot.slack.posts() if p.get("thread_ts") == "1.000100"]
        assert len(thread) == 4 < POSTS_BEFORE, [p["text"] for p in thread]
        kinds = sorted(("card" if p is card or p["ts"] == card["ts"] else
                        "plan" if approval_of(p) else
                        "closed" if str(p["text"]).startswith("✅ Case") else
                        "agent" if p["text"] == ScriptedAgent.reply else p["text"])
                       for p in thread)
        assert kinds == ["agent", "card", "closed", "plan"]
        assert "the check passed" in next(p["text"] for p in thread
                                          if str(p["text"]).startswith("✅ Case"))

        updates = bot.slack.updates_of(card["ts"])
        stages = [status(u) for u in updates]
        assert [ORDER.index(s) for s in stages] == sorted(ORDER.index(s) for s in stages), \
            stages  # never back a stage
        assert {"WAIT_GATE", "CLOSED"} <= set(stages)
        shown = [texts(u) for u in updates]
        assert any("Waiting at the gate* — approvals 0 of 1" in s for s in shown)
        last = shown[-1]
        for part in ("✅ CLOSED · SEV3 · checkout returns 500s", "Approved by <@U0BOB>",
                     "✓ 1. Change nothing: observe only — done",
                     "✅ Held: stand-in readings (OPSGATE_STATIC_METRICS): the check passed",
                     "✅ *CLOSED* at", "/case catchup"):
            assert part in last, (part, last)
        for call in (*bot.slack.calls("chat.postMessage"), *bot.slack.calls("chat.update")):
            assert block_kit_problems(call.get("blocks")) == []


def test_while_the_agent_works_the_card_says_so_then_clears(sqlite_engine: Engine) -> None:
    agent = ScriptedAgent()
    with running_bot(sqlite_engine, agent=agent) as bot:
        to_the_gate(bot, "2.000100")
        card = card_of(bot.slack)
        working = "⏳ opsgate is working on <@U0ALICE>'s message…"
        # The plan message can come before the first turn ends: let that turn clear its line
        # first, or its end would clear the line of the turn this test watches.
        bot.slack.wait_for(lambda: len(replies_of(bot, agent)) == 1 and working not in texts(
            bot.slack.updates_of(card["ts"])[-1]), what="the first turn to end")
        before = len(bot.slack.updates_of(card["ts"]))
        agent.delay_s = 1.0
        bot.mention("<@U0BOT> is it the last deploy?", event_id="EvAsk", ts="2.000300",
                    thread_ts="2.000100")
        bot.slack.wait_for(lambda: any(working in texts(u)
                                       for u in bot.slack.updates_of(card["ts"])[before:]),
                           what="the working line on the card")
        bot.slack.wait_for(lambda: len(agent.runs) == 2 and working not in texts(
            bot.slack.updates_of(card["ts"])[-1]), what="the working line to clear")
        assert len(replies_of(bot, agent)) == 2  # the agent's answers stay thread replies
        assert [c["status"] for c in bot.slack.calls("assistant.threads.setStatus")] == \
            ["is working on it…"]  # asked once; refused: this app has no assistant status


def replies_of(bot: Any, agent: ScriptedAgent) -> list[dict[str, Any]]:
    return [p for p in bot.slack.posts() if p["text"] == agent.reply]


def test_an_app_with_the_assistant_status_shows_it_in_the_thread(sqlite_engine: Engine) -> None:
    agent = ScriptedAgent()
    with running_bot(sqlite_engine, agent=agent, assistant=True) as bot:
        to_the_gate(bot, "3.000100")
        bot.mention("<@U0BOT> anything else?", event_id="EvMore", ts="3.000300",
                    thread_ts="3.000100")
        bot.slack.wait_for(lambda: len(bot.slack.calls("assistant.threads.setStatus")) == 4,
                           what="the thread status set and cleared twice")
        calls = bot.slack.calls("assistant.threads.setStatus")
        assert [c["status"] for c in calls] == ["is working on it…", "", "is working on it…", ""]
        assert all(c["channel_id"] == "C0INCIDENT" and c["thread_ts"] == "3.000100"
                   for c in calls)
        card = card_of(bot.slack)
        assert not any("⏳" in texts(u) for u in bot.slack.updates_of(card["ts"]))


def test_the_thread_status_says_what_the_agent_looks_at(sqlite_engine: Engine) -> None:
    looks = ("querying http_5xx_ratio for payments-api, 13:30 to 14:30",
             "reading the rollout history of payments-api")
    agent = ScriptedAgent(looks=looks)
    with running_bot(sqlite_engine, agent=agent, assistant=True) as bot:
        to_the_gate(bot, "4.000100")
        bot.slack.wait_for(lambda: len(bot.slack.calls("assistant.threads.setStatus")) == 4,
                           what="the thread status through one turn")
        calls = bot.slack.calls("assistant.threads.setStatus")
        assert [c["status"] for c in calls] == [
            "is working on it…", f"is {looks[0]}…", f"is {looks[1]}…", ""]
        assert len(bot.slack.posts()) == len({p["ts"] for p in bot.slack.posts()})
        assert not any(look in str(p["text"]) for p in bot.slack.posts() for look in looks)


def test_the_card_s_look_line_is_escaped(sqlite_engine: Engine) -> None:
    agent = ScriptedAgent(looks=("reading the logs of pod <!channel>",), delay_s=0.5)
    with running_bot(sqlite_engine, agent=agent) as bot:
        to_the_gate(bot, "5.000100")
        card = card_of(bot.slack)
        bot.slack.wait_for(lambda: any("pod &lt;!channel&gt;" in texts(u)
                                       for u in bot.slack.updates_of(card["ts"])),
                           what="the look's line on the card")
        assert not any("<!channel>" in texts(u) for u in bot.slack.updates_of(card["ts"]))


def catchup(bot: Stack, case_id: UUID) -> tuple[str, str]:
    answer = bot.command(f"catchup {str(case_id)[:8]}").json()
    assert answer["response_type"] == "ephemeral"
    return answer["text"], texts(answer)


def test_catchup_at_the_gate_and_once_closed(engine: Engine) -> None:
    with running_bot(engine, two_person_risk=0.0) as bot:
        case_id, plan = to_the_gate(bot, "4.000100")
        bot.click(Action.APPROVE, approval_of(plan) or "", user=APPROVER, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: any(r["event"] == "plan_approval" for r in
                                       bot.app.cases.timeline(case_id)), what="the first yes")
        text, shown = catchup(bot, case_id)
        assert text == f"Catch-up on case {str(case_id)[:8]}: WAIT_GATE"
        assert "*Waiting on* *people*: 1 more approval(s) of plan “Take no action" in shown
        assert "from <@U0BOB>, <@U0CAROL> (not <@U0ALICE>, who requested it)" in shown
        assert "approved so far by <@U0BOB>" in shown  # a reason from the core, its ids as mentions
        assert re.sub(r"<@U0[A-Z]+>", "", shown).count("U0") == 0  # no id but in a mention
        assert "*Last 5 event(s)*" in shown and shown.count("\n<!date^") == 5  # Slack's time
        assert f"👍 <@{APPROVER}> approved plan `" in shown and "(1 more needed then)" in shown

        bot.click(Action.APPROVE, approval_of(plan) or "", user="U0CAROL", message_ts=plan["ts"])
        bot.slack.wait_for(lambda: bot.app.cases.get_case(case_id)["status"] == "CLOSED",
                           what="the case to close")
        text, shown = catchup(bot, case_id)
        assert text.endswith(": CLOSED")
        assert "*Waiting on* nothing: the case is closed" in shown
        assert "*verified* VERIFYING → CLOSED by verifier" in shown  # an event in words
        assert "✅ <@U0CAROL> approved plan `" in shown
        assert "approved by <@U0BOB>, <@U0CAROL>" in shown
        assert "needs a case id" in texts(bot.command("catchup").json())


def test_a_case_with_nowhere_to_post_has_no_card_and_no_dead_letter(sqlite_engine: Engine) -> None:
    """Opened over REST with no OPSGATE_INCIDENT_CHANNEL: the notifier says so in its log and
    moves on, rather than retrying the opening fact into the dead letters."""
    with running_bot(sqlite_engine, incident_channel=None) as bot:
        bot.app.cases.open_case(OpenCase("disk 95% on db-2", actor="alertmanager"), "rest-1")

        with sqlite_engine.connect() as conn:
            opened = conn.execute(select(outbox.c.id).where(
                outbox.c.topic == Topic.CASE_OPENED)).scalar_one()

        def taken(table: Any) -> bool:
            with sqlite_engine.connect() as conn:
                return conn.execute(select(table).where(
                    table.c.consumer == "notifier", table.c.message_id == opened)).first() \
                    is not None

        bot.slack.wait_for(lambda: taken(inbox) or taken(dead_letter),
                           what="the notifier to take the opening fact")
        assert taken(inbox) and not taken(dead_letter)
        assert bot.slack.posts() == []
