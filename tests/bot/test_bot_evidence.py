"""The evidence in Slack: the analyst's findings are on the case card, one line each with a link
to its graph (a Query button of an older findings message is acknowledged), and ``/case similar
<id>`` answers, ephemerally, with the case's similar past cases (what resolved them) and relevant
runbooks, on SQLite and PostgreSQL; ``opsgate demo`` reads the recorded demo series unless
``OPSGATE_SERIES_DIR`` is set."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from uuid import UUID

import pytest
from sqlalchemy import Engine

from bot.card import card_message
from bot.card_state import CaseState
from bot.notifier import SlackNotifier
from core.analysis.sources import RECORDED_DEMO
from core.cases.progress import progress_of
from core.domain.messages import Topic
from core.library import Library
from tests.support.cases import APPROVER as CASE_APPROVER
from tests.support.cases import open_case
from tests.support.library import PAST, closed_case
from tests.support.slack import APPROVER, Stack, ask, running_bot, shown

RUNBOOKS = Path(__file__).parents[1] / "fixtures" / "runbooks"
NEW_TITLE = "checkout latency regression after the v2.4 deploy"  # PAST[0] is the one to pick


def blocks_of(post: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = post.get("blocks")
    return list(json.loads(blocks) if isinstance(blocks, str) else blocks or [])


def findings_posts(bot: Stack) -> list[dict[str, Any]]:
    return [post for post in bot.slack.posts()
            if "Analysis:" in json.dumps(blocks_of(post))]


def happening(update: dict[str, Any]) -> str:
    """The card's "What is happening" section in one of its updates."""
    return next(str(b["text"]["text"]) for b in blocks_of(update)
                if b.get("block_id") == "case_card_happening")


def test_findings_are_on_the_case_card_not_in_the_thread(sqlite_engine: Engine) -> None:
    with running_bot(sqlite_engine, series_dir=str(RECORDED_DEMO)) as bot:
        assert bot.mention("<@U0OPSGATE> checkout latency up since the deploy",
                           event_id="Ev0FIND", ts="1700000100.000100").status_code == 200
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        card = next(p for p in bot.slack.posts() if p["text"].startswith("🔎 Case"))
        assert card["thread_ts"] == "1700000100.000100"
        bot.slack.wait_for(lambda: any("stepped up" in happening(u)
                                       for u in bot.slack.updates_of(card["ts"])),
                           what="the findings on the card")
        shown = next(happening(u) for u in bot.slack.updates_of(card["ts"])
                     if "stepped up" in happening(u))
        assert shown.startswith("*What is happening*\n• latency_p95_ms stepped up")
        assert "_(99%)_" in shown and "|graph>" not in shown  # recorded series: no graph
        assert findings_posts(bot) == []  # the thread is not told


def test_the_card_links_each_finding_to_its_graph(sqlite_engine: Engine) -> None:
    payload = {"case_id": str(UUID(int=7)), "checked": ["http_5xx_ratio"], "missing": [],
               "findings": [{"metric": "http_5xx_ratio", "statistic": "error_ratio",
                             "summary": "http_5xx_ratio 9% vs 0.2% before", "confidence": 0.97,
                             "link": "http://prometheus:9090/graph?g0.expr=x"}],
               "similar_cases": [{"title": "payments 502", "resolved_by": "Fail over"}],
               "runbooks": [{"title": "Errors after a deploy"}]}
    row = {"event": "analysis_findings", "actor": "analyst", "reason": "1 finding",
           "created_at": "2026-11-23T07:00:00+00:00",
           "meta": {"outcome": "note", "context": payload}}
    _, blocks = card_message(CaseState(progress_of({"case_id": str(UUID(int=7)), "title": "5xx",
                                                    "severity": "SEV2", "status": "ANALYZING"},
                                                   [row])))
    shown = happening({"blocks": blocks})
    assert "• http_5xx_ratio 9% vs 0.2% before _(97%)_ " \
           "<http://prometheus:9090/graph?g0.expr=x|graph>" in shown
    with running_bot(sqlite_engine, loop=False) as bot:
        assert SlackNotifier(bot.app).message(Topic.ANALYSIS_FINDINGS, payload) is None
        # A findings message of an older release carried Query buttons: Slack still reports
        # their clicks, and the bot acknowledges them and does nothing.
        click = bot.click("finding_link_http_5xx_ratio", "", user=APPROVER,
                          message_ts="1700000200.0001")
        assert click.status_code == 200 and not bot.slack.posts()


def test_case_similar_names_the_past_case_a_person_would_pick(engine: Engine) -> None:
    with running_bot(engine, loop=False, approvers=[CASE_APPROVER]) as bot:
        past = [closed_case(bot.app, *case) for case in PAST[:5]]
        library = Library(bot.app.engine)
        assert all(library.index_case(case_id) for case_id in past)
        assert library.index_runbooks(RUNBOOKS) == 2
        new = open_case(bot.app.cases, NEW_TITLE)

        assert "/case similar <id>" in shown(ask(bot, "help"))
        answer = ask(bot, f"similar {str(new)[:8]}")
        blocks = answer["blocks"]
        assert blocks[0]["text"]["text"] == f"*Evidence for case* `{str(new)[:8]}` {NEW_TITLE}"
        similar = blocks[2]["text"]["text"]
        assert similar.startswith(f"*Similar past cases*\n1. *{PAST[0][0]}* "
                                  f"(`{str(past[0])[:8]}`)\n    resolved by _{PAST[0][1]}_")
        assert similar.count("resolved by") <= 3
        assert "*Latency after a deploy*" in blocks[3]["text"]["text"]
        assert blocks[-1]["type"] == "context" and str(past[0])[:8] in str(blocks[-1])
        assert "Similar past cases:\n- checkout p95 latency over 2 s" in answer["text"]

        assert "Nothing to show" in shown(ask(bot, "similar ffff0000"))  # as another's case
        assert "is not a case id" in shown(ask(bot, "similar ../etc"))
        assert "needs a case id" in shown(ask(bot, "similar"))


def test_the_demo_reads_the_recorded_series_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from bot.sandbox.demo import demo_settings

    args = argparse.Namespace(postgres=None, database_url=f"sqlite:///{tmp_path}/demo.db",
                              redis=None)
    sandbox = cast(Any, SimpleNamespace(bot_token="xoxb-demo", signing_secret="s3cret",
                                        web_api_url="http://127.0.0.1:1/api/",
                                        traffic_gateway_url="http://127.0.0.1:1/demo/tg"))
    monkeypatch.delenv("OPSGATE_SERIES_DIR", raising=False)
    monkeypatch.delenv("OPSGATE_PROMETHEUS_URL", raising=False)
    assert demo_settings(args, sandbox).series_dir == str(RECORDED_DEMO)
    monkeypatch.setenv("OPSGATE_SERIES_DIR", str(tmp_path))
    assert demo_settings(args, sandbox).series_dir == str(tmp_path)
