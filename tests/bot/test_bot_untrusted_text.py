"""Issue 24, finding 1: an alert's words reach Slack as words. An alert whose name and summary
carry Slack's control sequences (a channel ping, a disguised link) goes through alert intake to
the case card, the plan message and the ``/case`` replies, and no text or mrkdwn field the bot
sends to Slack's Web API pings anyone or links anywhere the alert chose; nor does the agent's
reply when it repeats them."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine

from tests.support.alerts import AUTH, TOKEN, alert, notification
from tests.support.hostile import EVIL_NAME, EVIL_SUMMARY, mrkdwn_texts
from tests.support.slack import ScriptedAgent, ask, running_bot

SMUGGLED = ("<!channel>", "<https://evil.example")


def evil_notification() -> dict[str, Any]:
    """A firing group whose alert is named ``EVIL_NAME`` and says ``EVIL_SUMMARY``."""
    fired = alert(EVIL_NAME, "checkout-1:8080")
    fired["annotations"]["summary"] = EVIL_SUMMARY
    note = notification(EVIL_NAME, [fired])
    note["commonAnnotations"]["summary"] = EVIL_SUMMARY
    return note


def smuggled(value: Any) -> list[str]:
    return [text for text in mrkdwn_texts(value) if any(bad in text for bad in SMUGGLED)]


def test_an_alerts_words_ping_nobody_and_link_nowhere(sqlite_engine: Engine) -> None:
    agent = ScriptedAgent(reply=f"The alert says: {EVIL_SUMMARY}")
    with running_bot(sqlite_engine, agent=agent, alert_token=TOKEN) as bot:
        answer = bot.http.post(f"{bot.base}/alerts/alertmanager", json=evil_notification(),
                               headers=AUTH)
        assert answer.status_code == 200, answer.text
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        plan = bot.plan_messages()[0]
        card = bot.slack.posts()[0]
        bot.slack.wait_for(lambda: any("What is happening" in json.dumps(u)
                                       for u in bot.slack.updates_of(card["ts"])),
                           what="the card's first update")
        bot.mention("what does the alert say?", event_id="EvAsk", ts="9.000100",
                    thread_ts=card["ts"], kind="message")
        bot.slack.wait_for(lambda: any("The alert says" in str(p.get("text"))
                                       for p in bot.slack.posts()), what="the agent's reply")
        case_id = bot.app.cases.list_cases(None, limit=1)[0]["case_id"]
        short = str(case_id)[:8]
        replies = {what: ask(bot, f"{what} {short}") for what in ("status", "timeline",
                                                                 "catchup")}
        replies["list"] = ask(bot, "list")

        calls = [*bot.slack.calls("chat.postMessage"), *bot.slack.calls("chat.update"),
                 *bot.slack.calls("chat.postEphemeral")]
        assert calls and smuggled(calls) == []
        for what, reply in replies.items():
            assert smuggled(reply) == [], what
        # The alert's words are there, as words: the name, the link's label, the sentence.
        evil = "Evil &lt;!channel&gt; &lt;https://evil.example|click here&gt; \\u2217bold\\u2217"
        assert evil in json.dumps(plan["blocks"])  # its emphasis marks drawn as look-alikes
        assert any("re-login to Okta&gt; now" in str(p.get("text")) for p in bot.slack.posts())
        for what, reply in replies.items():
            assert "Evil &lt;!channel&gt;" in " ".join(mrkdwn_texts(reply)), what
