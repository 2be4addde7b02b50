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

from bot.sandbox.demo_world import CATALOG, StandInWorld, record_checkout_deploy
from core.analysis.sources import RECORDED_DEMO
from tests.support.slack import Stack, block_kit_problems, running_bot

TS = "5.000100"
NO_PROMETHEUS = "no Prometheus is configured"


@pytest.fixture
def world() -> Iterator[StandInWorld]:
    served = StandInWorld.start()
    try:
        yield served
    finally:
        served.stop()


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


def test_the_looks_stream_as_a_plan_then_the_findings_follow(sqlite_engine: Engine,
                                                            world: StandInWorld) -> None:
    for bot in investigate(sqlite_engine, world, streaming=True):
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
