"""The external MCP servers opsgate may call (``OPSGATE_MCP_SERVERS``: a JSON or YAML file) and
a blocking client for them, built on the SDK's ``Client`` (stdio or streamable HTTP).

Per server, two allow-lists: ``agent_tools``, which the agent may call, and only those whose
annotations say read-only; ``plan_tools``, which an approved plan's ``mcp.call`` step may call.
A header's value comes from an environment variable (``headers_env``), never from the file.

    servers:
      tickets:
        url: https://tickets.example/mcp
        headers_env: {Authorization: TICKETS_MCP_AUTH}
        agent_tools: [lookup_ticket]
        plan_tools: [restart_worker]
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.errors import OpsgateError
from core.settings_errors import InvalidSettings

if TYPE_CHECKING:  # the SDK (a second of imports) loads when a server is first called
    from mcp import Client
    from mcp.types import CallToolResult

T = TypeVar("T")
SERVER_NAME = r"^[a-z][a-z0-9_-]{0,31}$"
TOOL_NAME = r"^[A-Za-z0-9_.-]{1,64}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class RemoteUnavailable(OpsgateError):
    """An external MCP server could not be reached or did not answer in time: nothing is
    known to have happened there."""

    code = "mcp_server_unavailable"


class RemoteServer(BaseModel):
    """One external server: where it is (``url`` or ``command``) and what may be called."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=SERVER_NAME)
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers_env: dict[str, str] = Field(default_factory=dict)
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env_pass: list[str] = Field(default_factory=list)
    cwd: str | None = None
    agent_tools: list[str] = Field(default_factory=list)
    plan_tools: list[str] = Field(default_factory=list)
    component: str | None = Field(default=None, min_length=1, max_length=63)  # plan_tools act on
    timeout_s: float = Field(default=30.0, gt=0, le=600)

    @model_validator(mode="after")
    def _one_place(self) -> RemoteServer:
        if (self.url is None) == (self.command is None):
            raise ValueError("give either url (streamable HTTP) or command (stdio), not both")
        names = [*self.agent_tools, *self.plan_tools]
        if bad := [n for n in names if not re.match(TOOL_NAME, n)]:
            raise ValueError(f"not tool names: {bad}")
        env = [*self.headers_env.values(), *self.env_pass]
        if bad := [n for n in env if not re.match(ENV_NAME, n)]:
            raise ValueError(f"not environment variable names: {bad}")
        return self

    def headers(self) -> dict[str, str]:
        """The headers sent, read from the environment now (a missing variable sends none)."""
        return {header: os.environ[var] for header, var in self.headers_env.items()
                if var in os.environ}

    def transport(self) -> Any:
        """What the SDK's ``Client`` connects with."""
        if self.command is not None:
            from mcp import StdioServerParameters

            env = {name: os.environ[name] for name in self.env_pass if name in os.environ}
            return StdioServerParameters(command=self.command, args=self.args, env=env,
                                         cwd=self.cwd)
        assert self.url is not None
        return self.url


def load_servers(path: str | Path) -> dict[str, RemoteServer]:
    """The servers of the file at ``path``; ``InvalidSettings`` naming every problem."""
    where = f"OPSGATE_MCP_SERVERS={path}"
    try:
        text = Path(path).read_text("utf-8")
        data = _parse(text, str(path))
    except (OSError, ValueError) as exc:
        raise InvalidSettings([f"{where}: cannot read it: {exc}"]) from None
    servers = data.get("servers") if isinstance(data, Mapping) else None
    if not isinstance(servers, Mapping):
        raise InvalidSettings([f"{where}: expected an object with 'servers': {{name: {{…}}}}"])
    found: dict[str, RemoteServer] = {}
    problems: list[str] = []
    for name, body in servers.items():
        try:
            found[str(name)] = RemoteServer.model_validate({**dict(body), "name": name})
        except (ValidationError, TypeError) as exc:
            problems.append(f"{where}: server {name!r}: {_first_problem(exc)}")
    if problems:
        raise InvalidSettings(problems)
    return found


def _parse(text: str, path: str) -> Any:
    if path.endswith((".yaml", ".yml")):
        import yaml  # type: ignore[import-untyped]

        return yaml.safe_load(text)
    return json.loads(text)


def _first_problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False)[0]
        where = ".".join(map(str, error["loc"]))
        return f"{where}: {error['msg']}" if where else str(error["msg"])
    return str(exc)


@dataclass(frozen=True)
class RemoteTool:
    """A tool an external server lists: ``read_only`` only when its annotations say so."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool


@dataclass(frozen=True)
class RemoteResult:
    """What a call answered: the text (bounded by the caller), the structured content, and
    whether the tool reported an error."""

    is_error: bool
    text: str
    structured: Any = None

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"is_error": self.is_error, "text": self.text}
        if self.structured is not None:
            body["structured"] = self.structured
        return body


def list_tools(server: RemoteServer) -> list[RemoteTool]:
    """Every tool ``server`` lists, or ``RemoteUnavailable``."""

    async def listing(client: Client) -> list[RemoteTool]:
        tools = (await client.list_tools()).tools
        return [RemoteTool(server.name, t.name, t.description or "", dict(t.input_schema),
                           bool(t.annotations and t.annotations.read_only_hint)) for t in tools]

    return _with_client(server, listing, server.timeout_s)


def call_tool(server: RemoteServer, tool: str, arguments: Mapping[str, Any], *,
              meta: Mapping[str, Any] | None = None,
              timeout_s: float | None = None) -> RemoteResult:
    """Call ``tool`` once with ``arguments`` (``meta`` as the request's ``_meta``), or
    ``RemoteUnavailable`` when the server could not be reached or did not answer in time."""

    async def call(client: Client) -> RemoteResult:
        result = await client.call_tool(tool, dict(arguments),
                                        meta=None if meta is None else dict(meta))  # type: ignore[arg-type]
        return _result(result)

    return _with_client(server, call, timeout_s or server.timeout_s)


def _result(result: CallToolResult) -> RemoteResult:
    from mcp.types import TextContent

    parts = [block.text if isinstance(block, TextContent) else f"[{block.type} content]"
             for block in result.content]
    return RemoteResult(result.is_error, "\n".join(parts), result.structured_content)


def _with_client(server: RemoteServer, use: Callable[[Client], Awaitable[T]],
                 timeout_s: float) -> T:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session() -> T:
        with anyio.fail_after(timeout_s):
            transport = server.transport()
            if isinstance(transport, str):
                async with httpx2.AsyncClient(headers=server.headers(),
                                              timeout=timeout_s) as http, \
                        Client(streamable_http_client(transport, http_client=http),
                               read_timeout_seconds=timeout_s) as client:
                    return await use(client)
            async with Client(transport, read_timeout_seconds=timeout_s) as client:
                return await use(client)

    try:
        return _blocking(session)
    except Exception as exc:  # the SDK's boundary: transports fail in many ways
        raise RemoteUnavailable(f"the MCP server {server.name} did not answer: "
                                f"{_reason(exc)}", server=server.name) from exc


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:300]


def _blocking(session: Callable[[], Awaitable[T]]) -> T:
    """Run ``session`` to its end from synchronous code; from a thread that already runs an
    event loop, in a thread of its own."""
    import anyio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(session)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = anyio.run(session)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="mcp-client")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
