"""A principal scoped to channels reads and writes over MCP (stdio and ``/mcp``) only the cases
whose thread is in one of them (issue 24, finding 3): any other case is the tool error an
unknown case gets, word for word, and lists and similar cases leave it out."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import anyio
import pytest
from sqlalchemy import Engine, insert

from core import principals
from core.db.tables import chat_thread
from core.domain.commands import ChatThread, OpenCase
from core.library import Library
from tests.support.cases import APPROVER as CASE_APPROVER
from tests.support.library import PAST, closed_case
from tests.support.mcp_clients import TRANSPORTS, World, error_of, structured, world

MINE, THEIRS = "C0MINE", "C0THEIRS"
THREADS = itertools.count(1)


@pytest.fixture(params=TRANSPORTS)
def mcp(request: pytest.FixtureRequest, engine: Engine) -> Iterator[World]:
    with world(request.param, engine, approvers=[CASE_APPROVER]) as found:
        _, found.tokens["scoped"] = principals.create(engine, "team-bot", "operator",
                                                      channels=[MINE])
        yield found


def case_in_channel(mcp: World, channel: str | None, title: str) -> str:
    thread = None if channel is None else \
        ChatThread("T0001", channel, f"1700000000.{next(THREADS):06d}")
    opened = mcp.app.cases.open_case(OpenCase(title=title, actor="U0ALICE", thread=thread),
                                     uuid.uuid4().hex)
    return str(opened.data()["case_id"])


def calls(mcp: World, role: str, *requests: tuple[str, dict[str, Any]]) -> list[Any]:
    async def run() -> list[Any]:
        async with mcp.client(role) as client:
            return [await client.call_tool(name, args) for name, args in requests]

    return anyio.run(run)


def test_a_scoped_principal_gets_not_found_outside_its_channels(mcp: World) -> None:
    mine = case_in_channel(mcp, MINE, "checkout 5xx in my channel")
    theirs = case_in_channel(mcp, THEIRS, "payroll export stuck (another team's)")
    nowhere = case_in_channel(mcp, None, "opened over REST, no thread")
    unknown = str(UUID(int=0xABCDEF))
    asked = [("get_case", {"case_id": mine}), ("list_cases", {}),
             *((tool, {"case_id": case_id}) for case_id in (theirs, nowhere, unknown)
               for tool in ("get_case", "case_timeline", "similar_cases")),
             ("add_note", {"case_id": theirs, "text": "looking at it"})]

    answers = calls(mcp, "scoped", *asked)

    assert structured(answers[0])["case"]["case_id"] == mine
    assert [c["case_id"] for c in structured(answers[1])["cases"]] == [mine]
    outside = answers[2:8]
    as_unknown = answers[8:11] * 2
    for refused, expected in zip(outside, as_unknown, strict=True):
        error = error_of(refused)
        assert error["code"] == "not_found"
        shown = str(error).replace(theirs, unknown).replace(nowhere, unknown)
        assert shown == str(error_of(expected))
        assert "payroll" not in str(refused.content) and "REST" not in str(refused.content)
    assert error_of(answers[11])["code"] == "not_found"
    assert [row["event"] for row in mcp.app.cases.timeline(UUID(theirs))] == ["case_opened"]


def test_similar_cases_leave_out_cases_outside_the_scope(mcp: World) -> None:
    mine, theirs = (closed_case(mcp.app, *PAST[n]) for n in (0, 7))  # both "checkout …"
    with mcp.engine.begin() as conn:
        for case_id, channel in ((mine, MINE), (theirs, THEIRS)):
            conn.execute(insert(chat_thread).values(
                team="T0001", channel=channel, thread_ts=f"1700000000.{next(THREADS):06d}",
                case_id=case_id))
    library = Library(mcp.engine)
    assert all(library.index_case(case_id) for case_id in (mine, theirs))
    ask = ("similar_cases", {"query": "checkout errors latency", "limit": 5})

    scoped, = calls(mcp, "scoped", ask)
    unscoped, = calls(mcp, "reader", ask)

    assert {c["case_id"] for c in structured(unscoped)["cases"]} == {str(mine), str(theirs)}
    assert [c["case_id"] for c in structured(scoped)["cases"]] == [str(mine)]
    assert PAST[7][0] not in str(scoped.content)
