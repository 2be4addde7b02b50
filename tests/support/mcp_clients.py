"""Helpers of the MCP tests: the SDK's own client connected to opsgate over stdio (``python -m
core.cli mcp`` as a subprocess) or over streamable HTTP (``/mcp`` of the REST API served by
uvicorn), as a principal named by its token."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from sqlalchemy import Engine, func, select

from core import principals
from core.bootstrap import App, bootstrap
from core.db.tables import ops_case
from core.settings import Settings
from tests.support.metrics import STAND_IN_ENV, with_stand_in
from tests.support.peers import serve_api
from tests.support.processes import clean_env

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = REPO / "docs" / "runbooks"
TRANSPORTS = ("stdio", "http")
READ_TOOLS = {"get_case", "case_timeline", "list_cases", "similar_cases", "runbooks"}
WRITE_TOOLS = {"open_case", "add_note", "record_findings", "propose_plan"}
APPROVER_SLACK = "U0LEAD"


@dataclass
class World:
    """One opsgate over a test database, reachable over one transport, with a token per role."""

    transport: str
    engine: Engine
    app: App
    tokens: dict[str, str] = field(default_factory=dict)
    base_url: str | None = None

    @property
    def database_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=False)

    @asynccontextmanager
    async def client(self, role: str | None = "operator") -> AsyncIterator[Client]:
        """The SDK's client, as the principal of ``role``'s token (None: no token)."""
        token = None if role is None else self.tokens[role]
        if self.transport == "stdio":
            env = clean_env(**({} if token is None else {"OPSGATE_MCP_TOKEN": token}),
                            OPSGATE_RUNBOOKS_DIR=str(RUNBOOKS), **STAND_IN_ENV)
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "core.cli", "mcp", "--database-url", self.database_url],
                env=env, cwd=str(REPO))
            async with Client(params, read_timeout_seconds=60) as client:
                yield client
            return
        assert self.base_url is not None
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
                Client(streamable_http_client(f"{self.base_url}/mcp", http_client=http),
                       read_timeout_seconds=60) as client:
            yield client


@contextmanager
def world(transport: str, engine: Engine, **settings: Any) -> Iterator[World]:
    """A world with a reader, an operator and an approver (a person) token."""
    app = bootstrap(Settings(**with_stand_in({"runbooks_dir": str(RUNBOOKS), **settings})),
                    engine=engine)
    found = World(transport, engine, app)
    for name, role, slack in (("ro-bot", "reader", None), ("ops-bot", "operator", None),
                              ("lead", "approver", APPROVER_SLACK)):
        _, found.tokens[role] = principals.create(engine, name, role, slack)  # type: ignore[arg-type]
    try:
        if transport == "http":
            with serve_api(app) as base:
                found.base_url = base
                yield found
        else:
            yield found
    finally:
        app.gateway.close()


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def error_of(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    error: dict[str, Any] = result.structured_content["error"]
    return error


def replayed(result: CallToolResult) -> bool:
    return bool((result.meta or {}).get("opsgate/replayed"))


def case_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ops_case)).scalar_one())
