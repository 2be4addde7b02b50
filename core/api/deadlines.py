"""Bounds every PostgreSQL wait of an HTTP request (``core.db.database.bounded_waits``): during a
PostgreSQL blackhole ``/readyz`` and the REST handlers answer 503 within seconds instead of
hanging. Pure ASGI, around the whole request, so the endpoint's worker thread inherits it."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from core.db.database import bounded_waits

REQUEST_DB_WAIT_S = 2.0
"""The longest one wait for PostgreSQL may last in a request (a new connection: at least 2 s):
a stale pooled connection's ping and the reconnect after it stay within 5 s."""


class BoundedDatabaseWaits:
    def __init__(self, app: ASGIApp, seconds: float = REQUEST_DB_WAIT_S) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with bounded_waits(self.seconds):
            await self.app(scope, receive, send)
