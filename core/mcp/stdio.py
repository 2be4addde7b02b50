"""``opsgate mcp``: the case tools over stdio for a desktop app or an IDE, as the principal of
``--token``/``OPSGATE_MCP_TOKEN`` or, without one, as the local operator (whoever can start the
process can reach the database anyway; an operator never approves).

The token is looked up again at every request, as REST and ``/mcp`` do: once it is revoked or
rotated (``opsgate token``), the next call is refused, not served as whoever it named at start."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST

from core.bootstrap import App
from core.errors import Unauthorized
from core.mcp.server import PrincipalOf, build_server
from core.principals import Principal, authenticate

LOCAL_OPERATOR = Principal("local-operator", "operator")
"""Who ``opsgate mcp`` acts as without a token: writes, never approves."""
REFUSED = ("the MCP token of this `opsgate mcp` is unknown or revoked (`opsgate token list`): "
           "nothing ran; start it again with a live token")


def stdio_token(app: App, token: str | None) -> str | None:
    """``token``, else ``OPSGATE_MCP_TOKEN``; None when neither is set."""
    configured = app.settings.mcp_token
    return token or (None if configured is None else configured.get_secret_value()) or None


def stdio_principal(app: App, token: str | None) -> Principal:
    """The principal of ``token`` (else ``OPSGATE_MCP_TOKEN``); the local operator when
    neither is set; ``Unauthorized`` for an unknown or revoked token."""
    principal = _principal_of(app, stdio_token(app, token))
    if principal is None:
        raise Unauthorized("the MCP token is unknown or revoked (`opsgate token list`)")
    return principal


def _principal_of(app: App, token: str | None) -> Principal | None:
    if token is None:
        return LOCAL_OPERATOR
    api_token = app.settings.api_token
    return authenticate(app.engine, token, None if api_token is None
                        else api_token.get_secret_value())


def stdio_caller(app: App, token: str | None) -> PrincipalOf:
    """Who makes each request: the principal ``token`` names at that moment; a request made
    after the token was revoked or rotated is an MCP error naming why."""
    token = stdio_token(app, token)

    def current(_ctx: ServerRequestContext[Any, Any]) -> Principal:
        principal = _principal_of(app, token)
        if principal is None:
            raise MCPError(code=INVALID_REQUEST, message=REFUSED)
        return principal

    return current


def serve_stdio(app: App, token: str | None) -> None:
    """Serve MCP on this process's stdin and stdout until the client closes stdin, each request
    as the principal ``token`` names when it arrives (``stdio_caller``)."""
    server = build_server(app, stdio_caller(app, token))

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)
