"""Issue 24, finding 1: an alert's words reach Slack as words. An alert whose name and summary
carry Slack's control sequences (a channel ping, a disguised link) goes through alert intake to
the case card, the plan message and the ``/case`` replies, and no text or mrkdwn field the bot
sends to Slack's Web API pings anyone or links anywhere the alert chose."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine

from tests.support.alerts import AUTH, TOKEN, alert, notification
from tests.support.slack import ask, running_bot

# The exact payloads of the issue.
EVIL_NAME = "Evil <!channel> <https://evil.example|click here> *bold*"
EVIL_SUMMARY = "<!channel> please <https://evil.example/login|re-login to Okta> now"
SMUGGLED = ("<!channel>", "<https://evil.example")


def evil_notification() -> dict[str, Any]:
    fired = alert(EVIL_NAME, "checkout-1:8080")
    fired["annotations"]["summary"] = EVIL_SUMMARY
    note = notification(EVIL_NAME, [fired])
    note["commonAnnotations"]["summary"] = EVIL_SUMMARY
    return note


def texts_of(value: Any) -> Iterator[str]:
    """Every string Slack reads as mrkdwn in a Web API call's arguments or a reply: ``text``
    fallbacks and every mrkdwn object's ``text``, however deep (a ``plain_text`` object shows
    its text literally, by Slack's definition)."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)  # blocks arrive form-encoded as a JSON string
        except ValueError:
            return
        if isinstance(parsed, list | dict):
            yield from texts_of(parsed)
        return
    if isinstance(value, list):
        for item in value:
            yield from texts_of(item)
    elif isinstance(value, dict) and value.get("type") != "plain_text":
        for name, item in value.items():
            if name == "text" and isinstance(item, str):
                yield item
            else:
                yield from texts_of(item)


def smuggled(value: Any) -> list[str]:
    return [text for text in texts_of(value) if any(bad in text for bad in SMUGGLED)]


def test_an_alerts_words_ping_nobody_and_link_nowhere(sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine, alert_token=TOKEN) as bot:
        answer = bot.http.post(f"{bot.base}/alerts/alertmanager", json=evil_notification(),
                               headers=AUTH)
        assert answer.status_code == 200, answer.text
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        plan = bot.plan_messages()[0]
        card = bot.slack.posts()[0]
        bot.slack.wait_for(lambda: any("What is happening" in json.dumps(u)
                                       for u in bot.slack.updates_of(card["ts"])),
                           what="the card's first update")
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
        assert "Evil &lt;!channel&gt; &lt;https://evil.example|click here&gt; *bold*" in \
            json.dumps(plan["blocks"])
        for what, reply in replies.items():
            assert "Evil &lt;!channel&gt;" in " ".join(texts_of(reply)), what
