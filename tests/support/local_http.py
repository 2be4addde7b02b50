"""A real HTTP server on 127.0.0.1 for adapter and evidence tests: answers each path with a
canned reply (or a function of the request) and records every request it receives."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


Route = Callable[[Seen], Reply]


class LocalServer:
    def __init__(self, routes: dict[str, Route | Reply]) -> None:
        self.routes = routes
        self.seen: list[Seen] = []
        self.truncated = 0  # requests whose sender died before its body arrived: never acted on
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._http.daemon_threads = True
        self.base = f"http://127.0.0.1:{self._http.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base + path

    def keys(self) -> Counter[str]:
        """Requests received per Idempotency-Key."""
        return Counter(s.headers.get("idempotency-key", "") for s in self.seen)

    def record(self, seen: Seen) -> Reply:
        with self._lock:
            self.seen.append(seen)
        route = self.routes.get(seen.path, Reply(404, b"no route"))
        return route if isinstance(route, Reply) else route(seen)


def _handler_for(server: LocalServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if len(body) < length:
                # The client was killed mid-request (chaos tests do that): like any real
                # server, do not act on half a request, and do not count it as received.
                server.truncated += 1
                self.close_connection = True
                return
            parts = urlsplit(self.path)
            seen = Seen(self.command, parts.path, parse_qs(parts.query),
                        {k.lower(): v for k, v in self.headers.items()}, body)
            reply = server.record(seen)
            time.sleep(reply.delay_s)
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            # the client may stop reading early: that is what some tests check
            with suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(reply.body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def local_server(routes: dict[str, Route | Reply] | None = None) -> Iterator[LocalServer]:
    server = LocalServer(routes or {})
    thread = threading.Thread(target=server._http.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server._http.shutdown()
        server._http.server_close()
        thread.join(timeout=5)
