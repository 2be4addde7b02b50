"""Refuses request bodies over the API's size limit with 413, before any endpoint parses them.

Pure ASGI: a declared ``Content-Length`` over the limit is refused without reading; otherwise
the body is read up to the limit (chunked uploads included) and handed on unchanged. A path may
have an allowance of its own (Alertmanager's notifications, ``core.api.alerts``), told when it
refuses a body.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api.failures import error_response
from core.errors import PayloadTooLarge

MAX_BODY_BYTES = 64 * 1024


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Allowance:
    """A body limit, what the 413 advises, and what to do besides answering it."""

    max_bytes: int
    advice: str = ""
    on_refusal: Callable[[], None] = field(default=_nothing)


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES,
                 paths: Mapping[str, Allowance] | None = None) -> None:
        self.app = app
        self.allowance = Allowance(max_bytes)
        self.paths = dict(paths or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        allowance = self.paths.get(scope.get("path", ""), self.allowance)
        if self._declared_length(scope) > allowance.max_bytes:
            await self._refuse(allowance, scope, receive, send)
            return
        messages = await self._read_body(receive, allowance.max_bytes)
        if messages is None:
            await self._refuse(allowance, scope, receive, send)
            return
        await self.app(scope, replayed(messages, receive), send)

    @staticmethod
    def _declared_length(scope: Scope) -> int:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0

    @staticmethod
    async def _read_body(receive: Receive, max_bytes: int) -> list[Message] | None:
        """The body's messages, or None once they exceed the limit."""
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            size += len(message.get("body", b""))
            if size > max_bytes:
                return None
            if not message.get("more_body", False):
                return messages

    @staticmethod
    async def _refuse(allowance: Allowance, scope: Scope, receive: Receive, send: Send) -> None:
        allowance.on_refusal()
        advice = f": {allowance.advice}" if allowance.advice else ""
        error = PayloadTooLarge(f"the request body is over {allowance.max_bytes} bytes{advice}",
                                limit=allowance.max_bytes)
        await error_response(error)(scope, receive, send)


def replayed(messages: list[Message], receive: Receive) -> Receive:
    """A receive that hands out the messages already read, then the client's own."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
