"""Refuses request bodies over the API's size limit with 413, before any endpoint parses them.

Pure ASGI: a declared ``Content-Length`` over the limit is refused without reading; otherwise
the body is read up to the limit (chunked uploads included) and handed on unchanged.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api.failures import error_response
from core.errors import PayloadTooLarge

MAX_BODY_BYTES = 64 * 1024


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._declared_length(scope) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        messages = await self._read_body(receive)
        if messages is None:
            await self._refuse(scope, receive, send)
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

    async def _read_body(self, receive: Receive) -> list[Message] | None:
        """The body's messages, or None once they exceed the limit."""
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return None
            if not message.get("more_body", False):
                return messages

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = PayloadTooLarge(f"the request body is over {self.max_bytes} bytes",
                                limit=self.max_bytes)
        await error_response(error)(scope, receive, send)


def replayed(messages: list[Message], receive: Receive) -> Receive:
    """A receive that hands out the messages already read, then the client's own."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
