"""What a server process of a test's own shares, whichever server it is: a free port of
127.0.0.1, a log file in the test's folder, a process to stop (or kill -9), and ``with``."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.support.peers import free_port


class OwnServer:
    """A subclass names its ``log_name`` and starts its process with ``_launch``."""

    log_name = "server.log"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.restarts = 0
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def _launch(self, args: list[str]) -> None:
        with (self.workdir / self.log_name).open("ab") as log:
            self._popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def _running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def log_tail(self) -> str:
        return (self.workdir / self.log_name).read_text()[-2000:]

    def kill9(self) -> None:
        """SIGKILL: no flush, no goodbye."""
        if self._popen is not None and self._running():
            self._popen.send_signal(signal.SIGKILL)
            self._popen.wait(10)
        self._popen = None

    def stop(self) -> None:
        if self._popen is not None and self._running():
            self._popen.terminate()
            self._popen.wait(10)
        self._popen = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, _type: type[BaseException] | None, _exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.stop()
