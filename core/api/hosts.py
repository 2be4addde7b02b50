"""Refuses, with 403, every request whose ``Host`` — or ``Origin``, when it sends one — is not a
name of this server (``core.allowed_hosts``: ``OPSGATE_ALLOWED_HOSTS`` and the loopback names),
before anything else reads it: REST, ``/mcp``, ``/slack/events``, the Alertmanager webhook and
the probes alike, with a token or without. A web page that had its own name resolve to this
server (DNS rebinding) cannot write through a browser that can reach it.

Pure ASGI, outside ``BodyLimit``: a refused request's body is never read.
"""

from __future__ import annotations

import logging

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from core.allowed_hosts import SETTING, AllowedHosts
from core.api.failures import JSON, error_body

log = logging.getLogger(__name__)

SHOWN_LIMIT = 100


class AllowedHostsOnly:
    def __init__(self, app: ASGIApp, hosts: AllowedHosts) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        code, message = refusal
        log.warning("refused a request to %s: %s", scope.get("path", ""), message)
        await Response(error_body(code, message), status_code=403,
                       media_type=JSON)(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[str, str] | None:
        """The error code and sentence refusing this request; None when it may go on."""
        headers = Headers(scope=scope)
        hosts = headers.getlist("host")
        if len(hosts) != 1:
            return "host_not_allowed", (f"the request has {len(hosts) or 'no'} Host headers, "
                                        "not one: refused, nothing ran")
        if not self.hosts.admits_host(hosts[0], str(scope.get("scheme", "http"))):
            return "host_not_allowed", (f"the Host {_shown(hosts[0])} is not a name this "
                                        f"server answers to ({SETTING}): refused, nothing ran")
        for origin in headers.getlist("origin"):
            if not self.hosts.admits_origin(origin):
                return "origin_not_allowed", (
                    f"the Origin {_shown(origin)} is not a page of this server ({SETTING}): "
                    "refused, nothing ran")
        return None


def _shown(header: str) -> str:
    """A header as a sentence may quote it: printable, cut short."""
    text = "".join(char if char.isprintable() else "?" for char in header)
    if len(text) > SHOWN_LIMIT:
        text = text[:SHOWN_LIMIT - 1] + "…"
    return repr(text)
