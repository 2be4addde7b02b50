"""Slack's retries: each event delivered four times (original + 3 retries, some while the first
is still running) starts one agent run and yields one plan message; a retry after an attempt that
died mid-work is processed; every ack is immediate whatever the agent does."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from slack_sdk import WebClient
from sqlalchemy import Engine, func, insert, select

from bot.cases import SlackCases, SlackThread
from bot.slack_store import SlackStore
from bot.tables import slack_event
from core.db.tables import ops_case
from tests.support.slack import (
    CHANNEL,
    TEAM,
    ScriptedAgent,
    mention_event,
    running_bot,
    to_the_gate,
)


def cases_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ops_case)).scalar_one())


def test_four_deliveries_one_agent_run_one_plan_message(pg_engine: Engine) -> None:
    agent = ScriptedAgent(delay_s=1.0)
    with running_bot(pg_engine, agent=agent) as bot:
        def deliver(retry: int | None) -> int:
            return bot.mention("<@U0BOT> orders API hangs", event_id="EvDup", ts="5.000100",
                               retry=retry).status_code

        assert deliver(None) == 200
        with ThreadPoolExecutor(3) as pool:  # two retries while the first still runs
            statuses = list(pool.map(deliver, [1, 2]))
        assert statuses == [200, 200]
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        assert deliver(3) == 200  # the last retry, after the work is done
        bot.drain()
        assert len(agent.runs) == 1
        assert len(bot.plan_messages()) == 1
        assert cases_count(pg_engine) == 1
        replies = [p for p in bot.slack.posts() if p.get("text") == agent.reply]
        assert len(replies) == 1


def test_mention_in_a_case_thread_is_one_run_though_slack_sends_it_twice(
        pg_engine: Engine) -> None:
    agent = ScriptedAgent()
    with running_bot(pg_engine, agent=agent) as bot:
        bot.mention("<@U0BOT> disk full on db-3", event_id="EvRoot", ts="6.000100")
        bot.slack.wait_for(lambda: len(agent.runs) == 1, what="the first run")
        # Slack sends one message that mentions the bot as app_mention AND as message.
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda kind: bot.mention(
                "<@U0BOT> any update?", event_id=f"Ev-{kind}", ts="6.000200",
                thread_ts="6.000100", kind=kind), ["app_mention", "message"]))
        bot.slack.wait_for(lambda: len(agent.runs) == 2, what="the follow-up run")
        # a plain reply in the case's thread continues the case too
        bot.mention("is the standby healthy?", event_id="EvReply", ts="6.000300",
                    thread_ts="6.000100", kind="message")
        bot.slack.wait_for(lambda: len(agent.runs) == 3, what="the reply's run")
        # an edit is not a new message
        edit = json.loads(mention_event("is the standby healthy??", event_id="EvEdit",
                                        ts="6.000400", thread_ts="6.000100", kind="message"))
        edit["event"]["subtype"] = "message_changed"
        bot.send(json.dumps(edit))
        bot.drain()
        assert len(agent.runs) == 3
        assert len({run[0] for run in agent.runs}) == 1  # one case
        assert cases_count(pg_engine) == 1


def test_chatter_outside_case_threads_is_ignored(sqlite_engine: Engine) -> None:
    agent = ScriptedAgent()
    with running_bot(sqlite_engine, agent=agent, loop=False) as bot:
        bot.mention("lunch?", event_id="EvChat", ts="7.000100", kind="message")
        bot.mention("in some thread", event_id="EvChat2", ts="7.000300", thread_ts="7.000200",
                    kind="message")
        bot.drain()
        assert agent.runs == [] and cases_count(sqlite_engine) == 0


def test_a_retry_after_an_attempt_that_died_is_processed(pg_engine: Engine) -> None:
    agent = ScriptedAgent()
    with running_bot(pg_engine, agent=agent, loop=False) as bot:
        # The first attempt claimed the event, then its process died ten minutes ago.
        with pg_engine.begin() as conn:
            conn.execute(insert(slack_event).values(
                event_id="EvDied", message_key="T0001:C0INCIDENT:8.000100", state="claimed",
                owner="dead", claimed_at=datetime.now(UTC) - timedelta(minutes=10)))
            # Another is being worked on right now by a live attempt.
            conn.execute(insert(slack_event).values(
                event_id="EvBusy", message_key="T0001:C0INCIDENT:9.000100", state="claimed",
                owner="alive", claimed_at=datetime.now(UTC)))
        bot.mention("<@U0BOT> cache stampede", event_id="EvDied", ts="8.000100", retry=2)
        bot.mention("<@U0BOT> queue backlog", event_id="EvBusy", ts="9.000100", retry=1)
        bot.slack.wait_for(lambda: len(agent.runs) == 1, what="the taken-over run")
        bot.drain()
        assert [run[1] for run in agent.runs] == ["<@U0BOT> cache stampede"]
        with pg_engine.connect() as conn:
            states = dict(conn.execute(select(slack_event.c.event_id, slack_event.c.state)).all())
        assert states == {"EvDied": "done", "EvBusy": "claimed"}


def test_acks_are_immediate_while_the_agent_thinks(sqlite_engine: Engine) -> None:
    agent = ScriptedAgent(delay_s=1.5)
    with running_bot(sqlite_engine, agent=agent, loop=False) as bot:
        started = time.perf_counter()
        answer = bot.mention("<@U0BOT> api slow", event_id="EvSlow", ts="10.000100")
        assert answer.status_code == 200
        # acked long before the agent answers (Slack gives 3 s)
        assert time.perf_counter() - started < agent.delay_s


class BrokenAgent(ScriptedAgent):
    def converse(self, case_id, text, *, user, correlation_id, watch=None):  # type: ignore[no-untyped-def]
        raise RuntimeError("model server exploded: Traceback (most recent call last)")


def test_an_unknown_failure_is_logged_with_its_id_and_the_user_gets_an_apology(
        sqlite_engine: Engine, caplog) -> None:  # type: ignore[no-untyped-def]
    with running_bot(sqlite_engine, agent=BrokenAgent(), loop=False) as bot:
        bot.mention("<@U0BOT> api down", event_id="EvBoom", ts="11.000100")
        bot.slack.wait_for(lambda: bool(bot.slack.calls("chat.postEphemeral")),
                           what="the apology")
        apology = bot.slack.calls("chat.postEphemeral")[0]
        assert apology["user"] == "U0ALICE" and apology["thread_ts"] == "11.000100"
        assert "Sorry" in apology["text"] and "EvBoom" in apology["text"]
        assert "Traceback" not in apology["text"] and "exploded" not in apology["text"]
    assert "slack request EvBoom failed" in caplog.text
    assert "model server exploded" in caplog.text


def test_a_reply_composed_before_the_gate_is_dropped_once_the_plan_is_there(
        sqlite_engine: Engine) -> None:
    """A reply composed while the case was NEW ("is NEW (version 0)") is not posted after the
    plan message: the thread already shows where the case stands. A reply composed at the gate
    is posted; the analysis moving on (NEW → PLANNING) makes no reply stale."""
    with running_bot(sqlite_engine, agent=ScriptedAgent()) as bot:
        case_id, _plan = to_the_gate(bot, "9.000100")
        cases = SlackCases(bot.app, WebClient(base_url=bot.slack.api_url, token="xoxb-test"),
                           SlackStore(bot.app.engine))
        where = SlackThread(TEAM, CHANNEL, "9.000100")
        before = len(bot.slack.posts())
        cases.say(where, "Case is NEW (version 0).", business_key="stale",
                  unless_moved=(case_id, "NEW"))
        assert len(bot.slack.posts()) == before  # dropped
        cases.say(where, "The plan waits for you.", business_key="fresh",
                  unless_moved=(case_id, "WAIT_GATE"))
        assert bot.slack.posts()[-1]["text"] == "The plan waits for you."
        assert not cases.moved_on(case_id, "WAIT_GATE")
        assert cases.moved_on(case_id, "ANALYZING") and cases.moved_on(case_id, "PLANNING")
