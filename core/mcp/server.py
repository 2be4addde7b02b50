"""opsgate's case tools as an MCP server (the SDK's lowlevel ``Server``), the same over stdio
and streamable HTTP: which tools a principal sees, and every call answered as a
``CallToolResult`` with structured content beside the text.

A write runs through the gateway under the caller's ``_meta.idempotencyKey`` when the request
carries one, else under the tool's business key: a retried call gets the first outcome (its
refusal included, as ``isError``), the same key with other arguments is a tool error naming the
reuse, and a duplicate that arrives while the first still runs waits for its outcome.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from pydantic import ValidationError

from core.bootstrap import App
from core.domain.plans import plan_problems
from core.errors import KeyReuse, NotFound, Unavailable
from core.gateway import BusinessRefusal, CallResult, CallStatus, ToolCall, call_key
from core.mcp.schemas import OUTPUTS
from core.mcp.tools import CaseTools
from core.principals import Principal
from core.strict_json import non_finite_problems
from core.tools.args import Args, ProposePlanArgs, input_schema
from core.tools.catalogue import BY_NAME, TOOLS, CaseTool

KEY_META = "idempotencyKey"
KEY_MAX_LENGTH = 200
IN_PROGRESS_WAIT_S = 10.0
INSTRUCTIONS = (
    "opsgate keeps incident cases: read them, open them, note what you find and propose change "
    "plans. Writes are idempotent: send _meta.idempotencyKey on a call you may retry (else the "
    "call's business key decides). A proposed plan waits at the gate until people approve it; "
    "no tool approves, rejects or executes a plan.")

PrincipalOf = Callable[[ServerRequestContext[Any, Any]], Principal]


class CaseToolServer:
    """The tools of one app for any principal, synchronously (the MCP handlers run it in a
    worker thread)."""

    def __init__(self, app: App, tools: CaseTools | None = None) -> None:
        self.app = app
        self.tools = tools or CaseTools(app)

    def listed(self, principal: Principal) -> list[types.Tool]:
        """The tools ``principal`` may call: reads for every role, writes for operators."""
        return [_listing(tool) for tool in TOOLS if _may(principal, tool)]

    def call(self, principal: Principal, name: str, arguments: Mapping[str, Any],
             caller_key: Any = None) -> types.CallToolResult:
        tool = BY_NAME.get(name)
        if tool is None:
            return failed("unknown_tool", f"there is no tool {name!r}; nothing ran (no tool "
                          "approves, rejects or executes a plan: people decide at the gate)",
                          {"tools": [t.name for t in TOOLS if _may(principal, t)]})
        if not _may(principal, tool):
            return failed("forbidden", f"{principal.name} is a {principal.role}: {name} needs "
                          "an operator or approver; nothing ran", {"role": principal.role})
        problems = non_finite_problems(arguments, "arguments")
        if problems:
            return failed("invalid_arguments", "the arguments hold numbers JSON does not "
                          "allow; nothing ran", {"problems": problems[:20]})
        try:
            args = tool.parse(arguments)
        except ValidationError as exc:
            return failed("invalid_arguments", "invalid arguments; nothing ran",
                          {"problems": [f"{'.'.join(map(str, e['loc'])) or 'arguments'}: "
                                        f"{e['msg']}" for e in exc.errors(include_url=False)]})
        try:
            self.tools.in_scope(principal, args)
            if not tool.writes:
                return succeeded(self.tools.read(tool, principal, args))
            return self._write(principal, tool, args, caller_key)
        except BusinessRefusal as no:
            return failed(no.code, no.message, no.details)
        except NotFound as missing:
            return failed(missing.code, missing.message, missing.details)
        except Unavailable as down:
            return failed(down.code, f"{down.message}; nothing ran, retry")

    # -- writes ---------------------------------------------------------------------------

    def _write(self, principal: Principal, tool: CaseTool[Any], args: Args,
               caller_key: Any) -> types.CallToolResult:
        if caller_key is not None and not _usable_key(caller_key):
            return failed("invalid_idempotency_key", f"_meta.{KEY_META} must be 1.."
                          f"{KEY_MAX_LENGTH} printable characters; nothing ran")
        if isinstance(args, ProposePlanArgs) and (problems := plan_problems(args.plan)):
            return failed("invalid_plan", "the plan fails the ChangePlan schema; nothing was "
                          "proposed; fix every problem and propose again",
                          {"problems": problems[:20]})
        intent = self.tools.intent(tool, principal, args)
        scope = f"mcp:{principal.name}"
        business_key = (f"{scope}:key:{caller_key}" if caller_key is not None
                        else f"{scope}:{intent.key}")
        call = ToolCall(f"mcp.{tool.name}", intent.fingerprint, principal.actor, scope,
                        business_key=business_key)
        service_key = "mcp:" + call_key(call, self.app.gateway.scope)
        result = self.app.gateway.run(call, lambda _args: intent.run(service_key),
                                      wait_s=IN_PROGRESS_WAIT_S, idempotent=True)
        return _answer(result, caller_key)


def _answer(result: CallResult, caller_key: Any) -> types.CallToolResult:
    replayed = result.status is CallStatus.REPLAYED
    meta = {"opsgate/status": str(result.status), "opsgate/key": result.key}
    if result.status is CallStatus.IN_PROGRESS:
        return failed("in_progress", "the same call is still running; retry in a moment",
                      meta=meta)
    if result.error is not None:
        error = dict(result.error)
        if isinstance(result.refusal, KeyReuse):
            named = (f"the idempotency key {caller_key!r}" if caller_key is not None
                     else "this call's business key")
            error["message"] = (f"{named} was used before with other arguments; nothing ran "
                                "(send a new key for a new request)")
        return failed(str(error.get("code")), str(error.get("message")),
                      error.get("details"), replayed=replayed, meta=meta)
    return succeeded(result.result, replayed=replayed, meta=meta)


def succeeded(data: Any, *, replayed: bool = False,
              meta: dict[str, Any] | None = None) -> types.CallToolResult:
    """A result: the structured content, and the same JSON as text for clients that read only
    text; a replay says so."""
    content: list[types.ContentBlock] = [types.TextContent(text=json.dumps(data, default=str))]
    if replayed:
        content.append(types.TextContent(text="replayed: this call was made before; this is "
                                              "its first outcome and nothing ran again"))
    return types.CallToolResult(content=content, structured_content=data,
                                _meta={**(meta or {}), "opsgate/replayed": replayed})


def failed(code: str, message: str, details: Mapping[str, Any] | None = None, *,
           replayed: bool = False, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    """A tool error (``isError``): the model sees why, and nothing else ran."""
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = dict(details)
    text = f"{code}: {message}"
    if details and details.get("problems"):
        text += "\n" + "\n".join(f"- {p}" for p in details["problems"])
    if replayed:
        text += "\n(replayed: the first outcome of this call)"
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True,
                                structured_content={"error": error, "replayed": replayed},
                                _meta={**(meta or {}), "opsgate/replayed": replayed})


def build_server(app: App, principal_of: PrincipalOf,
                 tools: CaseToolServer | None = None) -> Server[Any]:
    """The MCP server of ``app``: ``principal_of(ctx)`` names who makes each request (asked
    at every request, on a worker thread: it may read the database, and its ``MCPError`` is the
    request's answer)."""
    cases = tools or CaseToolServer(app)

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        principal = await anyio.to_thread.run_sync(principal_of, ctx)
        return types.ListToolsResult(tools=cases.listed(principal))

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        principal = await anyio.to_thread.run_sync(principal_of, ctx)
        caller_key = (params.meta or {}).get(KEY_META)
        # The case service and the gateway block (database, Redis, waiting for a duplicate):
        # a worker thread keeps the other requests of the connection moving.
        run = partial(cases.call, principal, params.name, params.arguments or {}, caller_key)
        return await anyio.to_thread.run_sync(run)

    return Server("opsgate", version=_version(), title="opsgate cases",
                  instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


def _listing(tool: CaseTool[Any]) -> types.Tool:
    if tool.writes:
        hints = types.ToolAnnotations(title=tool.title, read_only_hint=False,
                                      destructive_hint=False, idempotent_hint=True,
                                      open_world_hint=False)
    else:
        hints = types.ToolAnnotations(title=tool.title, read_only_hint=True,
                                      open_world_hint=False)
    return types.Tool(name=tool.name, title=tool.title, description=tool.description,
                      input_schema=input_schema(tool.args), output_schema=OUTPUTS[tool.name],
                      annotations=hints)


def _may(principal: Principal, tool: CaseTool[Any]) -> bool:
    return principal.may("operator") if tool.writes else principal.may("reader")


def _usable_key(key: Any) -> bool:
    return isinstance(key, str) and 1 <= len(key) <= KEY_MAX_LENGTH and key.isprintable()


def _version() -> str:
    try:
        return version("opsgate")
    except PackageNotFoundError:
        return "0+unknown"
