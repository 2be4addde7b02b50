"""``/mcp`` on the REST API: the case tools over streamable HTTP (the SDK's session manager,
stateless, JSON replies), each request made as the principal its bearer token names, exactly
as for REST: once the server has any token, a request needs one (a reader's lists only the
read tools); with none configured, callers are the anonymous operator. The SDK (half a second
of imports) loads at the first call, not when the API is built: ``opsgate serve`` starts
without it, and its session manager then runs for the rest of the API's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from core.bootstrap import App
from core.principals import (
    ANONYMOUS,
    OPEN_READER,
    Principal,
    authenticate,
    tokens_configured,
)

if TYPE_CHECKING:
    from fastapi import FastAPI
    from mcp.server.context import ServerRequestContext
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

PATH = "/mcp"
SCOPE_KEY = "opsgate.principal"


class McpEndpoint:
    """The ASGI app at ``/mcp``: authenticates, then hands the request to the SDK."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._manager: StreamableHTTPSessionManager | None = None
        self._lifespan: TaskGroup | None = None  # while the API runs: where the manager runs
        self._starting = anyio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        authorization = Headers(scope=scope).get("authorization")
        principal = await anyio.to_thread.run_sync(self.principal, authorization)
        if principal is None:
            refused = JSONResponse(
                {"error": {"code": "unauthorized", "message": "MCP needs 'Authorization: "
                           "Bearer <token>' (a reader or above): the token is missing, "
                           "unknown or revoked"}},
                status_code=401, headers={"WWW-Authenticate": 'Bearer realm="opsgate"'})
            await refused(scope, receive, send)
            return
        scope[SCOPE_KEY] = principal  # the SDK's request (ctx.request) wraps this scope
        manager = await self._started()
        await manager.handle_request(scope, receive, send)

    async def _started(self) -> StreamableHTTPSessionManager:
        """The SDK's session manager, built and run in the API's lifespan at the first call."""
        async with self._starting:
            if self._manager is None:
                if self._lifespan is None:
                    raise RuntimeError("/mcp is called outside the API's lifespan")
                manager = await anyio.to_thread.run_sync(self._build)
                await self._lifespan.start(_run, manager)
                self._manager = manager
            return self._manager

    def _build(self) -> StreamableHTTPSessionManager:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from core.mcp.server import build_server

        return StreamableHTTPSessionManager(app=build_server(self.app, request_principal),
                                            json_response=True, stateless=True)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The API's lifespan: a manager started by a call runs until it ends."""
        async with anyio.create_task_group() as lifespan:
            self._lifespan = lifespan
            try:
                yield
            finally:
                self._lifespan, self._manager = None, None
                lifespan.cancel_scope.cancel()

    def principal(self, authorization: str | None) -> Principal | None:
        """Who sends ``authorization``; None when they may not call at all."""
        configured = self.app.settings.api_token
        api_token = None if configured is None else configured.get_secret_value()
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None
            return authenticate(self.app.engine, token.strip(), api_token)
        if not tokens_configured(self.app.engine, api_token):
            return ANONYMOUS
        return OPEN_READER if self.app.settings.api_reads == "open" else None


def request_principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    """The principal ``McpEndpoint`` put on the request's scope."""
    scope = getattr(ctx.request, "scope", None) or {}
    principal = scope.get(SCOPE_KEY)
    if not isinstance(principal, Principal):
        from mcp.shared.exceptions import MCPError
        from mcp.types import INVALID_REQUEST

        raise MCPError(code=INVALID_REQUEST, message="unauthenticated request")
    return principal


async def _run(manager: StreamableHTTPSessionManager, *,
               task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    async with manager.run():
        task_status.started()
        await anyio.sleep_forever()


def mount_mcp(app: App, api: FastAPI) -> None:
    """Serve ``/mcp`` on ``api``; the SDK's session manager runs for the API's lifespan."""
    endpoint = McpEndpoint(app)
    api.router.routes.append(Route(PATH, endpoint=endpoint, include_in_schema=False))
    api.router.lifespan_context = _also_running(api.router.lifespan_context, endpoint)


def _also_running(outer: Callable[[Any], AbstractAsyncContextManager[Any]],
                  endpoint: McpEndpoint) -> Callable[[Any], AbstractAsyncContextManager[Any]]:
    @asynccontextmanager
    async def lifespan(asgi: Any) -> AsyncIterator[Any]:
        async with outer(asgi) as state, endpoint.running():
            yield state

    return lifespan
