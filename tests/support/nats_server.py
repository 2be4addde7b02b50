"""A ``nats-server -js`` of the test's own on a free port of 127.0.0.1 with its own store
directory: ``kill9()`` and ``start()`` again come back on the same store (streams, consumers and
their acknowledgments kept), as a JetStream server does after a crash."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from types import TracebackType

from tests.support.peers import free_port, poll
from tests.support.servers import missing

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


class NatsServer:
    """``with NatsServer(tmp_path) as server:`` then ``server.url``."""

    def __init__(self, workdir: Path, *, jetstream: bool = True) -> None:
        self.workdir = workdir
        self.store = workdir / "jetstream"
        self.port = free_port()
        self.jetstream = jetstream
        self.restarts = 0
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        if not os.access(NATS_SERVER, os.X_OK):
            missing(f"nats-server is not installed ({NATS_SERVER}; Debian's nats-server)")
        args = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port)]
        if self.jetstream:
            args += ["-js", "-sd", str(self.store)]
        log = (self.workdir / "nats-server.log").open("ab")
        self._popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        poll(self._answers, 15, f"nats-server on port {self.port}", 0.05)
        return self

    def kill9(self) -> None:
        """SIGKILL: no flush, no goodbye; the store keeps what the server had synced."""
        if self._popen is not None and self._popen.poll() is None:
            self._popen.send_signal(signal.SIGKILL)
            self._popen.wait(10)
        self._popen = None

    def stop(self) -> None:
        if self._popen is not None and self._popen.poll() is None:
            self._popen.terminate()
            self._popen.wait(10)
        self._popen = None

    def restart(self) -> None:
        """kill -9, then start again on the same port and store."""
        self.kill9()
        self.start()
        self.restarts += 1

    def _answers(self) -> bool:
        assert self._popen is not None and self._popen.poll() is None, \
            f"nats-server exited: {(self.workdir / 'nats-server.log').read_text()[-2000:]}"
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                return conn.recv(4).startswith(b"INFO")
        except OSError:
            return False

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, _type: type[BaseException] | None, _exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.stop()
