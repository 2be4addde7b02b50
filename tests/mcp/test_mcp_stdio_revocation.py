"""``opsgate mcp`` over stdio asks who its token names at every request (issue 24, finding 4):
started with a live token, it serves that principal; once ``opsgate token revoke`` or a rotation
ends the token, the next call is an MCP error naming why, and nothing runs."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from sqlalchemy import Engine

from core import principals
from tests.support.mcp_clients import REPO, WRITE_TOOLS, case_count, structured, world
from tests.support.processes import clean_env


def token_command(engine: Engine, *args: str) -> subprocess.CompletedProcess[str]:
    """``opsgate token …`` as an operator types it, against the test's database."""
    url = engine.url.render_as_string(hide_password=False)
    return subprocess.run([sys.executable, "-m", "core.cli", "token", *args, "--database-url",
                           url], cwd=REPO, env=clean_env(), capture_output=True, text=True,
                          timeout=60, check=True, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("ending", ["revoke", "rotate"])
def test_a_revoked_or_rotated_token_is_refused_at_the_next_stdio_call(engine: Engine,
                                                                      ending: str) -> None:
    async def session() -> tuple[set[str], dict[str, object], MCPError, MCPError]:
        async with mcp.client("operator") as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            opened = structured(await client.call_tool("open_case", {"title": "Before"}))
            if ending == "revoke":
                token_command(engine, "revoke", "ops-bot")
            else:
                token_command(engine, "create", "ops-bot", "--role", "operator", "--rotate")
            with pytest.raises(MCPError) as call:
                await client.call_tool("open_case", {"title": "After"})
            with pytest.raises(MCPError) as listing:
                await client.list_tools()
            return listed, opened, call.value, listing.value

    with world("stdio", engine) as mcp:
        listed, opened, call, listing = anyio.run(session)

    assert listed >= WRITE_TOOLS and opened["case"]["title"] == "Before"
    for refused in (call, listing):
        assert "the MCP token of this `opsgate mcp` is unknown or revoked" in refused.message
        assert "nothing ran" in refused.message
    assert case_count(engine) == 1  # the call after the revocation opened nothing


def test_a_live_token_keeps_working_beside_a_revoked_one(sqlite_engine: Engine) -> None:
    async def session() -> bool:
        async with mcp.client("reader") as client:
            principals.revoke(sqlite_engine, "ops-bot")
            result = await client.call_tool("list_cases", {})
            return bool(result.is_error)

    with world("stdio", sqlite_engine) as mcp:
        assert anyio.run(session) is False
