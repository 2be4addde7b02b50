"""``mcp.call``: one call of a tool of an external MCP server (``OPSGATE_MCP_SERVERS``), allowed
only when the server lists the tool under ``plan_tools``. It runs as a step of an approved plan
and nowhere else: the agent never calls a mutating MCP tool itself. The step's idempotency key
goes to the server in the request's ``_meta.idempotencyKey``; the tool's answer, bounded, is the
step's output on the timeline."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, field_validator

from core.mcp.remote import (
    SERVER_NAME,
    TOOL_NAME,
    RemoteResult,
    RemoteServer,
    RemoteUnavailable,
    call_tool,
)
from core.steps.adapters.base import StepContext, StepOutcome, StepRefused, parse_params
from core.steps.capture import truncate
from core.steps.words import Sentence, Value, json_words, refused, validated

ARGUMENTS_LIMIT = 65536
ServerName = Annotated[str, StringConstraints(pattern=SERVER_NAME)]
ToolName = Annotated[str, StringConstraints(pattern=TOOL_NAME)]
Call = Callable[..., RemoteResult]


class McpCallParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    server: ServerName
    tool: ToolName
    arguments: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _bounded(cls, arguments: dict[str, JsonValue]) -> dict[str, JsonValue]:
        if len(json.dumps(arguments)) > ARGUMENTS_LIMIT:
            raise ValueError(f"the arguments are over {ARGUMENTS_LIMIT} bytes of JSON")
        return arguments


def describe(params: Mapping[str, Any]) -> Sentence:
    """The step in words: "Call tool scale of MCP server ops with {replicas: 3}"."""
    p = validated(McpCallParams, params)
    if not isinstance(p, McpCallParams):
        return refused("mcp.call", p)
    arguments = (" with ", Value(json_words(p.arguments))) if p.arguments else ()
    return ("Call tool ", Value(p.tool), " of MCP server ", Value(p.server), *arguments)


class McpCallAdapter:
    action = "mcp.call"

    def __init__(self, servers: Mapping[str, RemoteServer], output_limit: int,
                 call: Call = call_tool) -> None:
        self._servers = dict(servers)
        self._output_limit = output_limit
        self._call = call

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome:
        parsed = parse_params(McpCallParams, params, self.action)
        server = self._allowed(parsed)
        label = f"{self.action} {parsed.server}.{parsed.tool}"
        detail: dict[str, Any] = {"server": parsed.server, "tool": parsed.tool,
                                  "idempotency_key": ctx.idempotency_key}
        try:
            result = self._call(server, parsed.tool, parsed.arguments,
                                meta={"idempotencyKey": ctx.idempotency_key},
                                timeout_s=ctx.timeout_s)
        except RemoteUnavailable as down:
            return StepOutcome(False, f"{label}: {down.message}",
                               detail={**detail, "unavailable": True})
        detail["is_error"] = result.is_error
        if result.structured is not None and \
                len(json.dumps(result.structured, default=str)) <= self._output_limit:
            detail["structured"] = result.structured
        summary = "the tool reported an error" if result.is_error else "done"
        return StepOutcome(not result.is_error, f"{label}: {summary}",
                           output=truncate(result.text, self._output_limit), detail=detail)

    def _allowed(self, parsed: McpCallParams) -> RemoteServer:
        server = self._servers.get(parsed.server)
        if server is None:
            raise StepRefused(f"{self.action}: no MCP server {parsed.server!r} is configured "
                              "(OPSGATE_MCP_SERVERS)", action=self.action, server=parsed.server)
        if parsed.tool not in server.plan_tools:
            raise StepRefused(f"{self.action}: {parsed.server}.{parsed.tool} is not on the "
                              "server's plan_tools (OPSGATE_MCP_SERVERS)", action=self.action,
                              server=parsed.server, tool=parsed.tool)
        return server
