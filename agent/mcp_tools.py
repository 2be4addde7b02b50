"""External MCP tools the agent may call: from ``OPSGATE_MCP_SERVERS``, only a server's
``agent_tools`` whose annotations say read-only, offered to the model as ``mcp__<server>__<tool>``.
A tool that changes things is never offered: it runs only as an approved plan's ``mcp.call``
step. Each server is listed once per process (a server that could not be listed is asked again
on the next turn); every call goes through the gateway (``agent.tools``), bounded in size."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.settings import AgentSettings
from core.mcp.remote import (
    RemoteResult,
    RemoteServer,
    RemoteTool,
    RemoteUnavailable,
    call_tool,
    list_tools,
    load_servers,
)
from core.settings import Settings
from core.steps.capture import truncate

log = logging.getLogger(__name__)

PREFIX = "mcp__"
RELIST_AFTER_S = 60.0  # a server that could not be listed is not asked again before this
_OPENAI_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

Lister = Callable[[RemoteServer], list[RemoteTool]]
Caller = Callable[[RemoteServer, str, Mapping[str, Any]], RemoteResult]


def exposed_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{tool}"


@dataclass(frozen=True)
class Offered:
    """A read-only tool the model may call, as it knows it."""

    name: str
    server: RemoteServer
    tool: RemoteTool


class McpToolbox:
    """The external tools of one process's agent."""

    def __init__(self, servers: Mapping[str, RemoteServer], result_limit: int, *,
                 lister: Lister = list_tools, caller: Caller | None = None) -> None:
        self.servers = dict(servers)
        self.result_limit = result_limit
        self._lister = lister
        self._caller = caller or (lambda server, tool, args: call_tool(server, tool, args))
        self._listed: dict[str, list[RemoteTool]] = {}
        self._unlisted_until: dict[str, float] = {}
        self._lock = threading.Lock()

    # -- what the model is offered ----------------------------------------------------------

    def offered(self) -> dict[str, Offered]:
        """Allowed, read-only tools of every server that could be listed, by exposed name."""
        found: dict[str, Offered] = {}
        for server in self.servers.values():
            for tool in self._tools_of(server):
                name = exposed_name(server.name, tool.name)
                if tool.name in server.agent_tools and tool.read_only and \
                        _OPENAI_NAME.match(name):
                    found[name] = Offered(name, server, tool)
        return found

    def specs(self) -> list[dict[str, Any]]:
        """The OpenAI function specs of the offered tools."""
        return [{"type": "function", "function": {
            "name": name, "description": f"[MCP {o.server.name}, read-only] "
                                         f"{o.tool.description}"[:1000],
            "parameters": _parameters(o.tool.input_schema)}}
            for name, o in sorted(self.offered().items())]

    def plan_only(self, name: str) -> bool:
        """Whether ``name`` names a configured tool the agent may not call itself."""
        if not name.startswith(PREFIX) or name in self.offered():
            return False
        server, _, tool = name.removeprefix(PREFIX).partition("__")
        configured = self.servers.get(server)
        return configured is not None and (tool in configured.plan_tools
                                           or tool in configured.agent_tools)

    # -- a call -----------------------------------------------------------------------------

    def call(self, offered: Offered, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The tool's answer, bounded: text cut to the limit, structured content only when it
        fits. ``RemoteUnavailable`` when the server did not answer."""
        result = self._caller(offered.server, offered.tool.name, arguments)
        body = RemoteResult(result.is_error, truncate(result.text, self.result_limit)).as_dict()
        if result.structured is not None:
            shown = json.dumps(result.structured, default=str)
            if len(shown) <= self.result_limit:
                body["structured"] = result.structured
            else:
                body["structured_omitted"] = f"{len(shown)} characters, over the limit"
        return body

    def _tools_of(self, server: RemoteServer) -> list[RemoteTool]:
        with self._lock:
            if server.name in self._listed:
                return self._listed[server.name]
            if time.monotonic() < self._unlisted_until.get(server.name, 0.0):
                return []
        try:
            tools = self._lister(server)
        except RemoteUnavailable as down:
            log.warning("agent: MCP server %s not listed: %s", server.name, down.message)
            with self._lock:
                self._unlisted_until[server.name] = time.monotonic() + RELIST_AFTER_S
            return []
        with self._lock:
            self._listed[server.name] = tools
        return tools


def toolbox_from_settings(settings: Settings) -> McpToolbox | None:
    """The toolbox of ``OPSGATE_MCP_SERVERS``; None when unset or no server allows the agent
    anything."""
    if not settings.mcp_servers:
        return None
    servers = {name: server for name, server in load_servers(settings.mcp_servers).items()
               if server.agent_tools}
    return McpToolbox(servers, settings.layer(AgentSettings).mcp_result_limit) if servers else None


def _parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    parameters = dict(schema)
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    return parameters


__all__ = ["PREFIX", "McpToolbox", "Offered", "RemoteUnavailable", "toolbox_from_settings"]
