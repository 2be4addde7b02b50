"""A ``nats-server -js`` of the test's own on a free port of 127.0.0.1 with its own store
directory: ``kill9()`` and ``start()`` again come back on the same store (streams, consumers and
their acknowledgments kept), as a JetStream server does after a crash; ``restart_empty()`` comes
back on the same port with its store gone, as a pod started without its volume does."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from tests.support.own_server import OwnServer
from tests.support.peers import poll
from tests.support.servers import missing

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


class NatsServer(OwnServer):
    """``with NatsServer(tmp_path) as server:`` then ``server.url``."""

    log_name = "nats-server.log"

    def __init__(self, workdir: Path, *, jetstream: bool = True) -> None:
        super().__init__(workdir)
        self.store = workdir / "jetstream"
        self.jetstream = jetstream

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        if not os.access(NATS_SERVER, os.X_OK):
            missing(f"nats-server is not installed ({NATS_SERVER}; Debian's nats-server)")
        args = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port)]
        if self.jetstream:
            args += ["-js", "-sd", str(self.store)]
        self._launch(args)
        poll(self._answers, 15, f"nats-server on port {self.port}", 0.05)
        return self

    def restart(self) -> None:
        """kill -9, then start again on the same port and store."""
        self.kill9()
        self.start()
        self.restarts += 1

    def restart_empty(self) -> None:
        """kill -9, remove the store, then start again on the same port: every stream, consumer
        and message gone."""
        self.kill9()
        shutil.rmtree(self.store, ignore_errors=True)
        self.start()
        self.restarts += 1

    def _answers(self) -> bool:
        assert self._running(), f"nats-server exited: {self.log_tail()}"
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                return conn.recv(4).startswith(b"INFO")
        except OSError:
            return False
