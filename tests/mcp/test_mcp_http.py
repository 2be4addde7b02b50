"""``/mcp`` on the REST API: the REST principals authenticate it (a missing, unknown or revoked
token is 401 before the SDK sees the request; reads may be open; a server with no token at all
has the anonymous operator), and the REST API keeps working beside it."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import anyio
import httpx2
from sqlalchemy import Engine

from core import principals
from core.bootstrap import bootstrap
from core.settings import Settings
from tests.support.mcp_clients import READ_TOOLS, WRITE_TOOLS, World, structured, world
from tests.support.metrics import STAND_IN_METRICS
from tests.support.peers import serve_api

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "probe", "version": "0"}}}
HEADERS = {"Accept": "application/json, text/event-stream"}


def post(base_url: str, token: str | None) -> httpx2.Response:
    auth = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx2.post(f"{base_url}/mcp", json=INITIALIZE, headers={**HEADERS, **auth},
                       timeout=10)


def test_mcp_needs_a_live_token_once_the_server_has_one(sqlite_engine: Engine) -> None:
    with world("http", sqlite_engine) as mcp:
        assert mcp.base_url is not None
        missing, unknown = post(mcp.base_url, None), post(mcp.base_url, "og_not-a-token")
        principals.revoke(sqlite_engine, "ops-bot")
        revoked = post(mcp.base_url, mcp.tokens["operator"])
        live = post(mcp.base_url, mcp.tokens["reader"])
        health = httpx2.get(f"{mcp.base_url}/healthz", timeout=10)

    assert [r.status_code for r in (missing, unknown, revoked)] == [401, 401, 401]
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert live.status_code == 200 and live.json()["result"]["serverInfo"]["name"] == "opsgate"
    assert health.status_code == 200


def test_open_reads_let_a_caller_without_a_token_read_only(sqlite_engine: Engine) -> None:
    async def listed(mcp: World) -> set[str]:
        async with mcp.client(None) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    with world("http", sqlite_engine, api_reads="open") as mcp:
        names = anyio.run(listed, mcp)

    assert names == READ_TOOLS


def test_without_any_token_the_caller_is_the_anonymous_operator(sqlite_engine: Engine) -> None:
    app = bootstrap(Settings(static_metrics=STAND_IN_METRICS), engine=sqlite_engine)

    async def opened(base_url: str) -> tuple[set[str], Any]:
        found = World("http", sqlite_engine, app, base_url=base_url)
        async with found.client(None) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            return names, await client.call_tool("open_case", {"title": "Laptop incident"})

    with serve_api(app) as base_url:
        names, result = anyio.run(opened, base_url)

    assert names == READ_TOOLS | WRITE_TOOLS
    case_id = structured(result)["case"]["case_id"]
    assert app.cases.timeline(UUID(case_id))[0]["actor"] == "anonymous"
