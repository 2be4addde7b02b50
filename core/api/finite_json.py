"""Refuses JSON request bodies holding NaN or ±Infinity with 422, and bodies nested deeper than
``core.strict_json.MAX_DEPTH`` with 400 ``json_too_deep``, before any endpoint parses them (REST,
``/mcp``, ``/slack/events``, the Alertmanager webhook: a deep body is never a 500).

FastAPI reads bodies with Python's ``json``, which accepts those constants, and a NaN passes
every numeric bound (``risk_score <= 1`` is false for it either way). Pure ASGI, like
``BodyLimit`` (which runs first, so the body here is already bounded): a JSON body is read
whole, checked with ``core.strict_json`` and handed on unchanged; a body that is not JSON at
all is left for the endpoint to refuse in its own words.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api.failures import error_response
from core.api.limits import replayed
from core.errors import InvalidRequest
from core.strict_json import NonFiniteNumber, TooDeep, loads


class FiniteJsonBody:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        messages = await _read_body(receive)
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        try:
            loads(body)
        except NonFiniteNumber as exc:
            error = InvalidRequest(f"invalid request: body: {exc} (NaN and Infinity are "
                                   "refused)", problems=[{"loc": "body", "msg": str(exc),
                                                          "type": "json_non_finite"}])
            await error_response(error)(scope, replayed(messages, receive), send)
            return
        except TooDeep as deep:
            await error_response(deep)(scope, replayed(messages, receive), send)
            return
        except ValueError:
            pass  # not JSON: the endpoint says so
        await self.app(scope, replayed(messages, receive), send)


def _is_json(scope: Scope) -> bool:
    """What FastAPI would read as JSON: a JSON media type, or no content type at all."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = bytes(value).split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return True


async def _read_body(receive: Receive) -> list[Message]:
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            return messages
