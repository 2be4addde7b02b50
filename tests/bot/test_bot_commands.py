"""``/case``: answers in the ack, ephemeral, in Block Kit; ``new`` starts a case thread; short id
prefixes work; unknown subcommands get the help, refusals say why."""

from __future__ import annotations

from sqlalchemy import Engine

from tests.support.slack import CHANNEL, REQUESTER, ask, running_bot, shown


def test_case_commands(engine: Engine) -> None:
    with running_bot(engine) as bot:
        assert "/case new <title>" in shown(ask(bot, "help"))
        assert "/case status <id>" in shown(ask(bot, ""))
        unknown = ask(bot, "frobnicate now")
        assert "Unknown subcommand `frobnicate`" in shown(unknown)
        assert "/case list" in shown(unknown)
        assert "needs a title" in shown(ask(bot, "new"))

        opening = ask(bot, "new Checkout p99 over 2 s")
        assert "Opening case" in opening["text"]
        bot.slack.wait_for(lambda: bool(bot.slack.posts()), what="the root message")
        root = bot.slack.posts()[0]
        assert root["channel"] == CHANNEL and "thread_ts" not in root
        bot.slack.wait_for(lambda: bot.case_of_thread(root["ts"]) is not None,
                           what="the case's thread")
        case_id = bot.case_of_thread(root["ts"])
        short = str(case_id)[:8]
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan in the thread")
        assert all(p.get("thread_ts") == root["ts"] for p in bot.slack.posts()[1:])
        assert any(short in str(u.get("text")) for u in bot.slack.calls("chat.update"))

        status = shown(ask(bot, f"status {short}"))
        assert short in status and "Checkout p99 over 2 s" in status and "WAIT_GATE" in status
        assert str(case_id) in str(ask(bot, f"status {case_id}")["blocks"])
        timeline = shown(ask(bot, f"timeline {short[:6]}"))
        assert "*case opened* as NEW" in timeline and "*plan proposed*" in timeline
        assert "None" not in timeline
        assert REQUESTER in timeline
        assert short in shown(ask(bot, "list"))
        assert short in shown(ask(bot, "list wait_gate"))
        assert "none" in shown(ask(bot, "list closed"))

        assert "is not a case status" in shown(ask(bot, "list sleeping"))
        assert "Nothing to show" in shown(ask(bot, "status ffff0000"))  # as another's case
        assert "is not a case id" in shown(ask(bot, "status ../etc"))
        assert "needs a case id" in shown(ask(bot, "timeline"))
