"""``opsgate mcp``: the case tools over stdio for a desktop app or an IDE, as the principal of
``--token``/``OPSGATE_MCP_TOKEN`` or, without one, as the local operator (whoever can start the
process can reach the database anyway; an operator never approves)."""

from __future__ import annotations

import anyio
from mcp.server.stdio import stdio_server

from core.bootstrap import App
from core.errors import Unauthorized
from core.mcp.server import build_server
from core.principals import Principal, authenticate

LOCAL_OPERATOR = Principal("local-operator", "operator")
"""Who ``opsgate mcp`` acts as without a token: writes, never approves."""


def stdio_principal(app: App, token: str | None) -> Principal:
    """The principal of ``token`` (else ``OPSGATE_MCP_TOKEN``); the local operator when
    neither is set; ``Unauthorized`` for an unknown or revoked token."""
    configured = app.settings.mcp_token
    token = token or (None if configured is None else configured.get_secret_value())
    if not token:
        return LOCAL_OPERATOR
    api_token = app.settings.api_token
    principal = authenticate(app.engine, token, None if api_token is None
                             else api_token.get_secret_value())
    if principal is None:
        raise Unauthorized("the MCP token is unknown or revoked (`opsgate token list`)")
    return principal


def serve_stdio(app: App, principal: Principal) -> None:
    """Serve MCP on this process's stdin and stdout until the client closes stdin."""
    server = build_server(app, lambda _ctx: principal)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)
