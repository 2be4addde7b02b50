"""Serving an ASGI app with uvicorn on a thread of its own, so one process can run the sandbox
(playing Slack) beside opsgate's API (the bot) as two separate HTTP servers, as in real life."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from core.errors import InternalError, OpsgateError

STARTUP_TIMEOUT_S = 15.0


class PortTaken(OpsgateError):
    """The port to bind is already in use."""

    code = "port_taken"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def check_free(host: str, port: int) -> None:
    """Raise ``PortTaken`` when ``host:port`` cannot be bound (say so before starting anything)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PortTaken(f"{host}:{port} is already in use ({exc.strerror}); "
                            "pick another with --port") from exc


class ThreadedServer:
    """One uvicorn server on a daemon thread; ``start`` returns once it listens."""

    def __init__(self, app: Any, host: str, port: int, name: str) -> None:
        # No WebSocket protocol (nothing here speaks it; skipping it skips its imports).
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                access_log=False, lifespan="off", ws="none",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self.server.run, name=name, daemon=True)

    def start(self) -> ThreadedServer:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive():
                raise InternalError(f"the server for {self.url} stopped while starting")
            if time.monotonic() > deadline:
                raise InternalError(f"the server for {self.url} did not start in time")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout_s)
