"""opsgate as an MCP server, through the SDK's own client over stdio and over streamable HTTP:
the tools and their annotations per role, writes through the gateway (one key, one effect, the
same answer; concurrent repeats; key reuse; refusals replayed), and no tool past the gate."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import anyio
import pytest
from sqlalchemy import Engine

from core.domain.fsm import CaseStatus
from tests.support.agents import approvals, plans
from tests.support.cases import PLAN, case_in
from tests.support.mcp_clients import (
    APPROVER_SLACK,
    READ_TOOLS,
    REPO,
    TRANSPORTS,
    WRITE_TOOLS,
    World,
    case_count,
    error_of,
    replayed,
    structured,
    world,
)
from tests.support.processes import clean_env


@pytest.fixture(params=TRANSPORTS)
def mcp(request: pytest.FixtureRequest, engine: Engine) -> Iterator[World]:
    with world(request.param, engine) as found:
        yield found


def test_each_role_lists_its_tools_with_their_annotations(mcp: World) -> None:
    async def listings() -> dict[str, dict[str, Any]]:
        found = {}
        for role in ("reader", "operator", "approver"):
            async with mcp.client(role) as client:
                found[role] = {tool.name: tool for tool in (await client.list_tools()).tools}
        return found

    listed = anyio.run(listings)

    assert set(listed["reader"]) == READ_TOOLS
    assert set(listed["operator"]) == set(listed["approver"]) == READ_TOOLS | WRITE_TOOLS
    for name, tool in listed["operator"].items():
        hints = tool.annotations
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        if name in READ_TOOLS:
            assert hints.read_only_hint is True
        else:
            assert (hints.read_only_hint, hints.idempotent_hint, hints.destructive_hint) == (
                False, True, False)
    # nothing that decides at the gate, for anyone
    assert not any(word in name for name in listed["approver"]
                   for word in ("approve", "reject", "exec"))


def test_open_case_twice_with_one_key_is_one_case_and_the_same_answer(mcp: World) -> None:
    async def twice() -> list[Any]:
        async with mcp.client("operator") as client:
            key = {"idempotencyKey": "incident-7-open"}
            return [await client.call_tool("open_case", {"title": "Checkout 5xx"}, meta=key)
                    for _ in range(2)]

    first, second = anyio.run(twice)

    assert structured(first) == structured(second)
    assert (replayed(first), replayed(second)) == (False, True)
    assert case_count(mcp.engine) == 1
    case_id = UUID(structured(first)["case"]["case_id"])
    opened = mcp.app.cases.timeline(case_id)[0]
    assert opened["actor"] == "ops-bot"  # the principal, never a body's say-so
    assert opened["meta"]["principal"] == "ops-bot" and opened["meta"]["via"] == "mcp"


# Up to 23 PostgreSQL connections at once: kept apart from the process loop's (the "heavy"
# lane of tests/conftest.py).
def test_twenty_concurrent_identical_calls_open_one_case(mcp: World) -> None:
    answers: list[Any] = []

    async def concurrently() -> None:
        async with mcp.client("operator") as client:
            async def call() -> None:
                answers.append(await client.call_tool(
                    "open_case", {"title": "Payments queue stuck", "severity": "SEV2"}))

            async with anyio.create_task_group() as group:
                for _ in range(20):
                    group.start_soon(call)

    anyio.run(concurrently)

    assert len(answers) == 20
    assert len({structured(a)["case"]["case_id"] for a in answers}) == 1
    assert sum(not replayed(a) for a in answers) == 1
    assert case_count(mcp.engine) == 1


def test_a_key_reused_with_other_arguments_is_a_tool_error(mcp: World) -> None:
    async def reuse() -> list[Any]:
        async with mcp.client("operator") as client:
            key = {"idempotencyKey": "k-42"}
            return [await client.call_tool("open_case", {"title": "Disk full"}, meta=key),
                    await client.call_tool("open_case", {"title": "CPU hot"}, meta=key),
                    # without a key the title is the business key: another severity is a reuse
                    await client.call_tool("open_case", {"title": "Disk full on db-2"}),
                    await client.call_tool("open_case", {"title": "disk FULL  on db-2",
                                                         "severity": "SEV1"})]

    first, reused, by_title, other_severity = anyio.run(reuse)

    structured(first)
    error = error_of(reused)
    assert error["code"] == "idempotency_key_reused" and "'k-42'" in error["message"]
    assert "k-42" in reused.content[0].text
    structured(by_title)
    assert error_of(other_severity)["code"] == "idempotency_key_reused"
    assert case_count(mcp.engine) == 2


def test_a_reader_lists_no_write_tool_and_cannot_write(mcp: World) -> None:
    async def as_reader() -> tuple[set[str], Any, Any]:
        async with mcp.client("reader") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            refused = await client.call_tool("open_case", {"title": "Reader tries"})
            listing = await client.call_tool("list_cases", {})
            return names, refused, listing

    names, refused, listing = anyio.run(as_reader)

    assert names.isdisjoint(WRITE_TOOLS)
    assert error_of(refused)["code"] == "forbidden"
    assert structured(listing) == {"cases": []}
    assert case_count(mcp.engine) == 0


def test_a_refusal_is_a_tool_error_and_is_replayed(mcp: World) -> None:
    case_id = case_in(mcp.app.cases, CaseStatus.NEW)

    async def too_early() -> list[Any]:
        async with mcp.client("operator") as client:
            return [await client.call_tool("propose_plan", {"case_id": str(case_id),
                                                            "plan": PLAN}) for _ in range(2)]

    first, second = anyio.run(too_early)

    assert error_of(first) == error_of(second)
    assert error_of(first)["code"] == "illegal_transition"
    assert (replayed(first), replayed(second)) == (False, True)
    assert mcp.app.cases.get_case(case_id)["status"] == CaseStatus.NEW


def test_no_tool_moves_a_case_past_the_gate(mcp: World) -> None:
    case_id = case_in(mcp.app.cases, CaseStatus.PLANNING)
    ref = {"case_id": str(case_id)}

    async def everything() -> list[Any]:
        async with mcp.client("approver") as client:
            proposed = await client.call_tool("propose_plan", {**ref, "plan": PLAN})
            calls = [proposed]
            for name, args in (("record_findings", {**ref, "summary": "the deploy did it"}),
                               ("add_note", {**ref, "text": "approve it please"}),
                               ("propose_plan", {**ref, "plan": {**PLAN, "title": "again"}}),
                               ("approve_plan", {**ref, "plan_hash": "x"}),
                               ("execute_plan", ref), ("gate_approved", ref)):
                calls.append(await client.call_tool(name, args))
            calls.append(await client.call_tool("get_case", ref))
            return calls

    proposed, findings, note, again, *gate_calls, read = anyio.run(everything)

    assert structured(proposed)["next"].startswith("waiting at the gate")
    structured(findings)
    structured(note)
    assert error_of(again)["code"] == "illegal_transition"
    assert all(error_of(call)["code"] == "unknown_tool" for call in gate_calls)
    assert structured(read)["case"]["status"] == CaseStatus.WAIT_GATE
    assert structured(read)["plan"]["proposed_by"] == APPROVER_SLACK
    assert mcp.app.cases.get_case(case_id)["status"] == CaseStatus.WAIT_GATE
    assert plans(mcp.engine, case_id) == 1 and approvals(mcp.engine, case_id) == 0


def test_the_read_tools_answer_in_their_output_schemas(mcp: World) -> None:
    """The SDK's client checks each structured result against the tool's output schema."""
    case_id = case_in(mcp.app.cases, CaseStatus.ANALYZING)
    ref = {"case_id": str(case_id)}

    async def read_and_conclude() -> list[Any]:
        async with mcp.client("operator") as client:
            concluded = await client.call_tool("record_findings",
                                               {**ref, "summary": "p95 up since the deploy"})
            return [concluded, *[await client.call_tool(name, args) for name, args in (
                ("get_case", ref), ("case_timeline", {**ref, "limit": 2}),
                ("list_cases", {"status": "PLANNING"}), ("similar_cases", ref),
                ("runbooks", {"query": "latency after a deploy"}),
                ("get_case", {"case_id": "not-a-uuid"}))]]

    concluded, case, timeline, listing, similar, runbooks, missing = anyio.run(
        read_and_conclude)

    assert structured(concluded)["case"]["status"] == CaseStatus.PLANNING
    assert structured(case)["case"]["status"] == CaseStatus.PLANNING
    assert [row["event"] for row in structured(timeline)["timeline"]] == [
        "start_analysis", "analysis_done"]
    assert [c["case_id"] for c in structured(listing)["cases"]] == [str(case_id)]
    assert structured(similar) == {"cases": []}  # nothing closed yet
    assert structured(runbooks)["runbooks"] and all(
        hit["excerpt"] for hit in structured(runbooks)["runbooks"])
    assert error_of(missing)["code"] == "not_found"


def test_stdio_refuses_to_start_with_an_unknown_token(sqlite_engine: Engine) -> None:
    url = sqlite_engine.url.render_as_string(hide_password=False)
    done = subprocess.run([sys.executable, "-m", "core.cli", "mcp", "--database-url", url,
                           "--token", "og_unknown"], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)

    assert done.returncode == 1 and done.stdout == ""
    assert "the MCP token is unknown or revoked" in done.stderr
