"""Pins, on both databases: the pin reaction on a message of a case's thread adds that message
(author, text, permalink) to the case's timeline once, whatever Slack delivers — retries,
several people pinning, reactions out of order and at once, a pin removed and added again —
and the card, ``/case catchup`` and ``opsgate export`` show it. Other reactions and threads
without a case change nothing."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import Engine, func, select

from core.chat import PINNED_EVENT
from core.db.tables import case_timeline
from core.ops.export import export_case
from tests.support.slack import (
    APPROVER,
    REQUESTER,
    SECOND,
    Stack,
    card_of,
    running_bot,
    texts,
    to_the_gate,
)

ROOT, SAID_A, SAID_B, ELSEWHERE = "5.000100", "5.000300", "5.000400", "6.000100"
LINK = "https://t.slack.com/archives/C0INCIDENT/p"


def pins(engine: Engine) -> list[dict[str, Any]]:
    """Every pin note of every case, oldest first."""
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(
            select(case_timeline).where(case_timeline.c.event == PINNED_EVENT)
            .order_by(case_timeline.c.id)).mappings()]


def replies_read(bot: Stack) -> int:
    return len(bot.slack.calls("conversations.replies"))


def deliver(bot: Stack, deliveries: list[tuple[str, str, str, str, int | None]]) -> None:
    """Send every reaction at once (four at a time), in the order given; all acked at once."""
    with ThreadPoolExecutor(4) as pool:
        acks = list(pool.map(lambda d: bot.react(d[0], user=d[1], ts=d[2], event_id=d[3],
                                                 retry=d[4]).status_code, deliveries))
    assert acks == [200] * len(deliveries)


def test_each_pinned_message_is_one_timeline_entry_whatever_slack_delivers(
        engine: Engine) -> None:
    with running_bot(engine) as bot:
        case_id, _ = to_the_gate(bot, ROOT)
        bot.slack.say(REQUESTER, "<@U0BOT> checkout returns 500s", ROOT)
        # Slack escapes &, < and > in a message's text
        bot.slack.say(REQUESTER, "the WAL disk on db-2 is at 98% &lt;&amp;&gt;", SAID_A,
                      thread_ts=ROOT)
        bot.slack.say(SECOND, "rolling back v2.4 takes 20 min", SAID_B, thread_ts=ROOT)
        bot.slack.say(REQUESTER, "lunch?", ELSEWHERE)  # a thread without a case

        deliveries: list[tuple[str, str, str, str, int | None]] = [
            ("pushpin", APPROVER, SAID_B, "EvPinB", None),  # B is pinned before A
            ("pushpin", APPROVER, SAID_A, "EvPinA", None),
            ("pushpin", APPROVER, SAID_A, "EvPinA", 1),  # Slack's retries of the same event
            ("pushpin", APPROVER, SAID_A, "EvPinA", 2),
            ("pushpin", SECOND, SAID_A, "EvPinA2", None),  # pinned by someone else too
            ("pushpin", APPROVER, ROOT, "EvPinRoot", None),
            ("eyes", APPROVER, SAID_B, "EvEyes", None),  # not the pin reaction
            ("pushpin", APPROVER, ELSEWHERE, "EvPinElsewhere", None),
        ]
        shuffled = random.Random(16).sample(deliveries, len(deliveries))
        deliver(bot, shuffled + shuffled[::-1])  # everything twice, in two orders
        pinning = sum(1 for d in deliveries if d[0] == "pushpin") * 2
        bot.slack.wait_for(lambda: replies_read(bot) == pinning, what="every pin handled")

        # Removing the reaction erases nothing (reaction_removed is not even subscribed); a pin
        # added again is the same pin.
        bot.react("pushpin", user=APPROVER, ts=SAID_A, event_id="EvPinAgain")
        bot.slack.wait_for(lambda: replies_read(bot) == pinning + 1, what="the pin again")

        # A pin's note is written after its message is read: wait for the notes to land.
        bot.slack.wait_for(lambda: len(pins(bot.app.engine)) >= 3, what="the pins' notes")
        found = pins(bot.app.engine)
        assert len(found) == 3, found
        assert {row["case_id"] for row in found} == {case_id}
        by_ts = {row["meta"]["context"]["ts"]: row for row in found}
        assert set(by_ts) == {ROOT, SAID_A, SAID_B}
        said_a = by_ts[SAID_A]
        assert said_a["reason"] == "the WAL disk on db-2 is at 98% <&>"  # the words, not markup
        assert said_a["actor"] in (APPROVER, SECOND)
        assert said_a["meta"]["context"] == {
            "author": REQUESTER, "channel": "C0INCIDENT", "ts": SAID_A, "thread_ts": ROOT,
            "permalink": f"{LINK}5000300"}
        assert by_ts[SAID_B]["meta"]["context"]["author"] == SECOND

        # The three notes landed; the card is redrawn after each, so wait for the draw that
        # shows the last of them (an earlier draw may show "Pinned" with fewer).
        card = card_of(bot.slack)
        pinned_a = (f"<@{REQUESTER}>: “the WAL disk on db-2 is at 98% &lt;&amp;&gt;” "
                    f"<{LINK}5000300|open>")
        bot.slack.wait_for(lambda: pinned_a in texts(bot.slack.updates_of(card["ts"])[-1]),
                           what="the pins on the card")
        shown = texts(bot.slack.updates_of(card["ts"])[-1])
        assert "*📌 Pinned*" in shown and pinned_a in shown
        catchup = texts(bot.command(f"catchup {str(case_id)[:8]}").json())
        assert "rolling back v2.4 takes 20 min" in catchup

        markdown = export_case(bot.app.engine, case_id)
        assert markdown.count("📌 pinned:") == 3
        assert f"📌 pinned: {SECOND} said “rolling back v2.4 takes 20 min” " \
               f"([message]({LINK}5000400))" in markdown


def test_a_permalink_slack_will_not_give_is_built(sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine) as bot:
        case_id, _ = to_the_gate(bot, ROOT)
        bot.slack.refused.add("chat.getPermalink")
        bot.slack.say(SECOND, "db-2 is a replica", SAID_A, thread_ts=ROOT)
        bot.react("pushpin", user=APPROVER, ts=SAID_A, event_id="EvPin")
        bot.slack.wait_for(lambda: bool(pins(bot.app.engine)), what="the pin")
        [row] = pins(bot.app.engine)
        assert row["case_id"] == case_id
        # auth.test's workspace URL, the message's ts without its dot, and the thread it is in
        assert row["meta"]["context"]["permalink"] == \
            f"https://t.slack.com/archives/C0INCIDENT/p5000300?thread_ts={ROOT}&cid=C0INCIDENT"


def test_the_pin_reaction_is_a_setting(sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine, pin_reaction=":round_pushpin:") as bot:
        to_the_gate(bot, ROOT)
        bot.slack.say(SECOND, "db-2 is a replica", SAID_A, thread_ts=ROOT)
        bot.react("pushpin", user=APPROVER, ts=SAID_A, event_id="EvOld")
        bot.react("round_pushpin", user=APPROVER, ts=SAID_A, event_id="EvNew")
        bot.slack.wait_for(lambda: bool(pins(bot.app.engine)), what="the pin")
        assert replies_read(bot) == 1  # the other reaction was not even looked at
        with bot.app.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(case_timeline).where(
                case_timeline.c.event == PINNED_EVENT)).scalar_one() == 1
