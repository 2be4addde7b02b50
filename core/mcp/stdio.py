"""``opsgate mcp``: the case tools over stdio for a desktop app or an IDE, as the principal of
``--token``/``OPSGATE_MCP_TOKEN`` or, without one, as the local operator (whoever can start the
process can reach the database anyway; an operator never approves).

The token is looked up again at every request, as REST and ``/mcp`` do: once it is revoked or
rotated (``opsgate token``), the next call is refused, not served as whoever it named at start.

Every line the server refuses gets a JSON-RPC error, as ``/mcp`` answers 400: a line that is not
JSON-RPC (not JSON, nested past the parser's limit) and a request nested deeper than
``core.strict_json.MAX_DEPTH`` (``refusing``). The error carries the request's ``id`` when its
top level names one (else ``null``, as JSON-RPC says), so the client waiting on it is answered."""

from __future__ import annotations

import json
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared._context_streams import create_context_streams
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
)
from pydantic import ValidationError

from core.bootstrap import App
from core.errors import Unauthorized
from core.mcp.server import PrincipalOf, build_server
from core.principals import Principal, authenticate
from core.strict_json import MAX_DEPTH, too_deep

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
    as the principal ``token`` names when it arrives (``stdio_caller``); a line it refuses is
    answered with a JSON-RPC error (``refusing``)."""
    server = build_server(app, stdio_caller(app, token))

    async def serve() -> None:
        async with stdio_server() as (read, write):
            admitted_in, admitted = create_context_streams[SessionMessage | Exception](0)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(refusing, read, write, admitted_in)
                await server.run(admitted, write, server.create_initialization_options())

    anyio.run(serve)


async def refusing(read: ReadStream[SessionMessage | Exception],
                   write: WriteStream[SessionMessage],
                   admitted: WriteStream[SessionMessage | Exception]) -> None:
    """Hand on what stdin says; answer each line the server would refuse with a JSON-RPC error
    instead (the SDK drops a line it cannot read without a word, and the client waits)."""
    async with admitted:
        async for item in read:
            refused = refusal(item)
            if refused is None:
                await admitted.send(item)
            else:
                await write.send(SessionMessage(refused))


def refusal(item: SessionMessage | Exception) -> JSONRPCError | None:
    """The JSON-RPC error that answers ``item``, or None when the server may read it."""
    if isinstance(item, Exception):
        line = _line_of(item)
        code = PARSE_ERROR if _not_json(item) else INVALID_REQUEST
        return _error(request_id(line), code, f"refused, nothing ran: {_first_line(item)}")
    message = item.message
    if isinstance(message, JSONRPCRequest) and too_deep(
            message.model_dump(mode="json", by_alias=True), MAX_DEPTH):
        return _error(message.id, INVALID_REQUEST, _TOO_DEEP)
    return None


_TOO_DEEP = (f"refused, nothing ran: the request is nested deeper than {MAX_DEPTH} levels of "
             "arrays and objects")


def request_id(line: str) -> str | int | None:
    """The ``id`` a JSON-RPC line names at its top level (a string or an integer), read without
    parsing what is nested; None when it names none or is not an object."""
    text = line.lstrip()
    if not text.startswith("{"):
        return None
    decoder, depth, at = json.JSONDecoder(), 0, 0
    while at < len(text):
        char = text[at]
        if char == '"':
            key, end = decoder.raw_decode(text, at)
            rest = text[end:].lstrip()
            if depth == 1 and key == "id" and rest.startswith(":"):
                return _id_at(decoder, text, len(text) - len(rest) + 1)
            at = end
            continue
        depth += 1 if char in "[{" else -1 if char in "]}" else 0
        at += 1
    return None


def _id_at(decoder: json.JSONDecoder, text: str, at: int) -> str | int | None:
    while at < len(text) and text[at].isspace():
        at += 1
    try:
        value, _end = decoder.raw_decode(text, at)
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return value


def _error(request: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request, error=ErrorData(code=code, message=message))


def _line_of(exc: Exception) -> str:
    """The line a pydantic ``ValidationError`` was raised on (it keeps it as the input)."""
    if isinstance(exc, ValidationError):
        for error in exc.errors(include_url=False):
            if isinstance(error.get("input"), str):
                return str(error["input"])
    return ""


def _not_json(exc: Exception) -> bool:
    return isinstance(exc, ValidationError) and any(
        error["type"] == "json_invalid" for error in exc.errors(include_url=False))


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False)
        if errors:
            return str(errors[0]["msg"])[:200]
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]
