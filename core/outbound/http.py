"""The one way opsgate makes an outbound HTTP call for a step or a probe: no proxies or netrc
from the environment, redirects followed only within the first URL's origin and allow-list,
the body read up to a bound, the whole exchange cut at a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from core.errors import InternalError
from core.outbound.allowlists import Origin

MAX_REDIRECTS = 5
_NO_BODY = object()


class RedirectRefused(InternalError):
    """The server redirected somewhere we may not go; the first request did go out."""

    code = "redirect_refused"

    def __init__(self, location: str, why: str) -> None:
        super().__init__(f"redirect to {location} refused: {why}", location=location)
        self.location = location


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: bytes  # at most the bound given to ``send``
    truncated: bool
    url: str  # where the final response came from
    duration_s: float

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def send(method: str, url: httpx.URL, *, allowed: Callable[[httpx.URL], bool],
         timeout_s: float, body_limit: int, headers: Mapping[str, str] | None = None,
         json: Any = _NO_BODY) -> HttpReply:
    """One request (and its allowed redirects). Raises ``httpx.HTTPError`` on network failure
    or timeout and ``RedirectRefused``; any HTTP status is a reply, not an error."""
    started = time.monotonic()
    deadline = started + timeout_s
    origin = Origin.of(url)
    # identity: a compressed body could expand far beyond the bound in one decoded chunk.
    sent_headers = {"Accept-Encoding": "identity", **(headers or {})}
    with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
        body_kwargs: dict[str, Any] = {} if json is _NO_BODY else {"json": json}
        request = client.build_request(method, url, headers=sent_headers, **body_kwargs)
        for _hop in range(MAX_REDIRECTS + 1):
            response = client.send(request, stream=True)
            redirect = response.next_request
            try:
                if redirect is None:
                    body, truncated = _read_bounded(response, body_limit, deadline)
                    return HttpReply(response.status_code, body, truncated, str(response.url),
                                     round(time.monotonic() - started, 3))
            finally:
                response.close()  # a redirect's body is never read: it is not bounded
            request = _next_hop(redirect, origin, allowed)
    raise RedirectRefused(str(request.url), f"more than {MAX_REDIRECTS} redirects")


def is_expected(status: int, expect: Sequence[int] | None) -> bool:
    """The plan's expected statuses, or any 2xx when it names none."""
    return status in expect if expect else 200 <= status < 300


def _next_hop(request: httpx.Request, origin: Origin,
              allowed: Callable[[httpx.URL], bool]) -> httpx.Request:
    if Origin.of(request.url) != origin:
        raise RedirectRefused(str(request.url), "it leaves the original host")
    if not allowed(request.url):
        raise RedirectRefused(str(request.url), "it is not on the allow-list")
    return request


def _read_bounded(response: httpx.Response, limit: int, deadline: float) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the body; stops early rather than read past the deadline."""
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the response body did not arrive before the deadline")
    return bytes(body), False
