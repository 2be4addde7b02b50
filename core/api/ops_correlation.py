"""Binds one correlation id to every HTTP request: the caller's ``X-Correlation-Id`` when it is
well formed, else a new one; the reply names it in the same header. Writes the request makes
(case service, gateway) record it, and every log line of the request carries it."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api.headers import CORRELATION_ID_MAX_LENGTH
from core.tracing import bound, new_id

HEADER = "X-Correlation-Id"
_RAW_HEADER = HEADER.lower().encode("latin-1")


def requested_id(scope: Scope) -> str | None:
    """The caller's correlation id, if it is one the API accepts."""
    for name, value in scope.get("headers", ()):
        if name == _RAW_HEADER:
            given: str = value.decode("latin-1")
            if 1 <= len(given) <= CORRELATION_ID_MAX_LENGTH and given.isprintable():
                return given
            return None
    return None


class CorrelationId:
    """Pure ASGI middleware: the id is bound for the whole request, endpoints and their
    threads included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        correlation_id = requested_id(scope) or new_id()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = correlation_id
            await send(message)

        with bound(correlation_id):
            await self.app(scope, receive, send_with_id)
