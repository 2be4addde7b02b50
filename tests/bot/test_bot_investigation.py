"""The investigation in the thread (issue 45), signed Slack requests in, the fake Web API out, the
agent package (offline planner model) looking at the demo's world (its catalog, the recorded
Kubernetes world, the checkout deploy, the analyst's recorded series; no Prometheus, no
Alertmanager): one message shows the looks as Slack's plan block, streamed where the workspace
streams and posted then updated where it does not, with the same final content; a look that
fails is an errored task with its reason; then one findings message holds the analyst's numbers
and what could not be read."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine

from bot.investigation import plan_block, rich_text, task_chunk
from bot.sandbox.demo_world import CATALOG, StandInWorld, record_checkout_deploy
from core.analysis.sources import RECORDED_DEMO
from core.chat import Link
from core.domain.commands import OpenCase
from core.investigate.gists import gist, sources
from core.investigate.progress import LookSeen
from tests.support.servers import REDIS_URL
from tests.support.slack import Stack, block_kit_problems, running_bot, texts
from tests.support.slack_streams import chunk_problems

TS = "5.000100"
NO_PROMETHEUS = "no Prometheus is configured"


@pytest.fixture
def world() -> Iterator[StandInWorld]:
    served = StandInWorld.start()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres+redis", marks=[
    pytest.mark.postgres, pytest.mark.redis])])
def database(request: pytest.FixtureRequest) -> tuple[Engine, dict[str, Any]]:
    """The engine and the settings of one database (PostgreSQL runs with the gateway's Redis)."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_engine"), {}
    prefix = request.getfixturevalue("redis_prefix")
    return request.getfixturevalue("pg_engine"), {"redis_url": REDIS_URL,
                                                  "gateway_key_prefix": f"{prefix}gw:"}


def investigate(engine: Engine, world: StandInWorld, *, streaming: bool, ts: str = TS,
                **overrides: Any) -> Iterator[Stack]:
    with running_bot(engine, real_agent=True, streaming=streaming, catalog=str(CATALOG),
                     kubeconfig=str(world.kubeconfig), series_dir=str(RECORDED_DEMO),
                     **overrides) as bot:
        record_checkout_deploy(bot.app, world)
        bot.mention("<@U0BOT> checkout 5xx errors since the deploy", event_id=f"Ev{ts}", ts=ts)
        bot.slack.wait_for(lambda: bool(bot.plan_messages()) and findings(bot) is not None,
                           timeout_s=60, what="the plan message and the findings")
        yield bot


def findings(bot: Stack) -> dict[str, Any] | None:
    return next((p for p in bot.slack.posts() if str(p.get("text")).startswith("Findings")),
                None)


def plan_of(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    plans = [block for block in blocks if block.get("type") == "plan"]
    assert len(plans) == 1, blocks
    return plans[0]


def content(plan: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Each task's title, status and output, its clock times left out (the two runs read the
    world a minute apart at most)."""
    def words(text: str) -> str:
        return re.sub(r"\d\d:\d\d", "HH:MM", text)

    return [(words(task["title"]), task["status"],
             words(" ".join(e["text"] for section in (task.get("output") or {}).get(
                 "elements", []) for e in section["elements"]))) for task in plan["tasks"]]


def sections(post: dict[str, Any]) -> str:
    import json

    blocks = post["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    return "\n".join(block["text"]["text"] for block in blocks)


def test_the_looks_stream_as_a_plan_then_the_findings_follow(
        database: tuple[Engine, dict[str, Any]], world: StandInWorld) -> None:
    engine, settings = database
    for bot in investigate(engine, world, streaming=True, **settings):
        slack = bot.slack
        assert len(slack.streams) == 1
        stream = next(iter(slack.streams.values()))
        assert stream.stopped and stream.thread_ts == TS and stream.recipient == "U0ALICE"
        assert slack.calls("chat.appendStream"), "each look's change is streamed"
        final = slack.final_blocks(stream.ts)
        assert block_kit_problems(final) == []
        plan = plan_of(final)
        assert plan["title"] == "What opsgate looked at"
        statuses = {task["status"] for task in plan["tasks"]}
        assert statuses <= {"complete", "error"} and "complete" in statuses
        told = content(plan)
        # No Prometheus, no Alertmanager here: those looks fail, each with its reason shown.
        failed = dict((title, output) for title, status, output in told if status == "error")
        assert NO_PROMETHEUS in failed["Listing the metrics of checkout"], told
        assert "no Alertmanager is configured" in failed["Reading the alerts of checkout"]
        assert any("deploy v1.8.0 of checkout by ci" in output for _, _, output in told), told
        # Every chunk Slack was sent passed its rules (the fake refuses others).
        assert not any(c.get("error") for c in slack.calls("chat.appendStream"))
        # The findings: the analyst's numbers, the change, what could not be read and why.
        said = sections(findings(bot) or {})
        assert "7.41%" in said and "0.19%" in said, said
        assert "deploy v1.8.0 of checkout" in said
        assert "*Not readable*" in said and NO_PROMETHEUS in said
        assert block_kit_problems((findings(bot) or {})["blocks"]) == []
        # The card's "What is happening" is the agent's sentence, whole.
        card = next(p for p in slack.posts() if "case_card" in str(p.get("blocks")))
        happening = texts(slack.updates_of(card["ts"])[-1])
        assert "roll the change back." in happening and "…" not in happening.split(
            "What is happening")[1].split("\n")[1], happening
        # Once: no second findings message, and no post carries the plan block besides.
        assert sum(str(p.get("text")).startswith("Findings") for p in slack.posts()) == 1
        assert not any("plan" in str(p.get("blocks")) and "task_id" in str(p.get("blocks"))
                       for p in slack.calls("chat.postMessage"))


def test_a_workspace_without_streaming_gets_the_same_plan_posted_and_updated(
        sqlite_engine: Engine, world: StandInWorld) -> None:
    streamed: list[tuple[str, str, str]] = []
    for bot in investigate(sqlite_engine, world, streaming=True):
        streamed = content(plan_of(bot.slack.final_blocks(next(iter(bot.slack.streams)))))
    for bot in investigate(sqlite_engine, world, streaming=False, ts="6.000100"):
        slack = bot.slack
        assert slack.calls("chat.startStream") and not slack.streams  # asked, refused
        posted = [p for p in slack.posts() if "task_id" in str(p.get("blocks"))]
        assert len(posted) == 1 and posted[0]["thread_ts"] == "6.000100"
        updates = slack.updates_of(posted[0]["ts"])
        assert len(updates) >= 2, "each look's change replaces the message in place"
        final = slack.final_blocks(posted[0]["ts"])
        assert block_kit_problems(final) == []
        assert all(block_kit_problems(u["blocks"]) == [] for u in updates)
        assert content(plan_of(final)) == streamed
        assert "7.41%" in sections(findings(bot) or {})


def test_a_case_no_person_opened_gets_the_plan_posted_even_where_slack_streams(
        sqlite_engine: Engine, world: StandInWorld) -> None:
    """A stream is addressed to one person: a case an alert opened has none, so its
    investigation is posted in its thread (in the incident channel) and updated in place."""
    with running_bot(sqlite_engine, real_agent=True, streaming=True, catalog=str(CATALOG),
                     kubeconfig=str(world.kubeconfig), series_dir=str(RECORDED_DEMO)) as bot:
        record_checkout_deploy(bot.app, world)
        bot.app.cases.open_case(OpenCase("checkout 5xx errors since the deploy",
                                         actor="alertmanager"), "alert-checkout").data()
        bot.slack.wait_for(lambda: bool(bot.plan_messages()) and findings(bot) is not None,
                           timeout_s=60, what="the plan message and the findings")
        assert not bot.slack.calls("chat.startStream")
        [posted] = [p for p in bot.slack.posts() if "task_id" in str(p.get("blocks"))]
        final = bot.slack.final_blocks(posted["ts"])
        assert block_kit_problems(final) == []
        assert plan_of(final)["title"] == "What opsgate looked at"
        assert {t["status"] for t in plan_of(final)["tasks"]} <= {"complete", "error"}


# -- the rules the fake holds the blocks to, and the blocks the bot builds -----------------------


def test_the_fake_refuses_what_slack_refuses_in_a_plan_and_its_chunks() -> None:
    good = {"task_id": "look_1", "title": "Reading the pods of checkout", "status": "complete",
            "output": rich_text("2 pod(s), all ready")}
    assert block_kit_problems([{"type": "plan", "title": "Looks", "tasks": [good]}]) == []
    bad = [
        {"type": "plan", "title": "", "tasks": [good]},
        {"type": "plan", "title": "Looks", "tasks": [{**good, "status": "completed"}]},
        {"type": "plan", "title": "Looks", "tasks": [good, good]},  # one task_id twice
        {"type": "plan", "title": "Looks", "tasks": [{**good, "output": "a string"}]},
        {"type": "plan", "title": "Looks", "tasks": [{**good, "sources": [
            {"type": "url", "url": "file:///etc/passwd", "text": "x"}]}]},
        {"type": "plan", "title": "Looks", "tasks": [{"title": "no id"}]},
    ]
    for block in bad:
        assert block_kit_problems([block]), block
    mixed = [{"type": "plan", "title": "Looks", "tasks": [good]}, {"type": "task_card", **good}]
    assert block_kit_problems(mixed)
    assert chunk_problems([{"type": "task_update", "id": "a", "title": "t",
                            "status": "complete", "output": "x" * 257}])
    assert chunk_problems([{"type": "task_update", "id": "a", "title": "t", "status": "done"}])
    assert chunk_problems([{"type": "plan_update"}])


def test_the_bot_s_plan_and_chunks_keep_within_the_rules_whatever_a_look_said() -> None:
    looks = [LookSeen(n, "query_metrics", "Querying " + "m" * 400, state,
                      "x " * 600, (Link("https://prometheus.example/graph?g0.expr=up", "up"),))
             for n, state in enumerate(("pending", "in_progress", "complete", "error"), 1)]
    assert block_kit_problems([plan_block("What opsgate looked at", looks, "b1")]) == []
    assert chunk_problems([task_chunk(seen) for seen in looks]) == []


def test_a_metric_look_reads_as_before_now_and_when() -> None:
    answer = {"series": [{"first": 0.0019, "last": 0.0741,
                          "change": {"at": "2026-11-27T14:04:00Z", "before": 0.0019,
                                     "after": 0.0741}}]}
    said = gist("query_metrics", {"query": 'http_5xx_ratio{service="checkout"}'}, answer)
    assert said == "http_5xx_ratio 0.19% → 7.41% from 14:04"
    assert gist("list_alerts", {}, {"error": "no Alertmanager is configured"}) == \
        "not read: no Alertmanager is configured"
    assert sources("query_metrics", {"query": "up"}, answer, "http://prom:9090/")[0].url == \
        "http://prom:9090/graph?g0.expr=up&g0.tab=0&g0.range_input=2h"
    assert sources("query_metrics", {"query": "up"}, answer, None) == ()
