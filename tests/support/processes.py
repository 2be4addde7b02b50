"""What the closed loop's end-to-end tests share: ``opsgate`` processes started with their own
environment (a fresh PostgreSQL schema, a Redis key prefix of the test's own), killed or stopped
on purpose, and their logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

OPSGATE = Path(sys.executable).with_name("opsgate")


def command(*args: str) -> list[str]:
    if OPSGATE.exists():
        return [str(OPSGATE), *args]
    return [sys.executable, "-m", "core.cli", *args]


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any OPSGATE_* variable, plus ``extra``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OPSGATE_")}
    return {**env, **extra}


@dataclass
class Process:
    """One ``opsgate`` subprocess; every start appends to the same log file."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> Process:
        assert not self.alive, f"{self.name} is already running"
        self._log = self.log_path.open("ab")
        self._log.write(f"--- start {self.starts + 1}\n".encode())
        self._log.flush()
        self.popen = subprocess.Popen(command(*self.args), env=self.env, stdout=self._log,
                                      stderr=subprocess.STDOUT, cwd=self.log_path.parent)
        self.starts += 1
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill9(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed or acknowledged."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)
        self.kills += 1

    def freeze(self) -> None:
        """SIGSTOP: the process holds what it has and does nothing until ``thaw``."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGCONT)

    def terminate(self, timeout_s: float = 30) -> int:
        """SIGTERM and wait: the exit code of a clean stop."""
        assert self.popen is not None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)
            raise

    def close(self) -> None:
        if self.alive:
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait(10)
        if self._log is not None:
            self._log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def output_of_this_start(self) -> str:
        """What the process printed since its latest start (the log holds every start's)."""
        return self.output().rpartition(f"--- start {self.starts}\n")[2]

    def wait_for_output(self, text: str, timeout_s: float = 60) -> None:
        """Until the process, since its latest start, printed ``text``."""
        deadline = time.monotonic() + timeout_s
        while text not in self.output_of_this_start():
            assert self.alive, f"{self.name} exited:\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"{self.name} never said {text!r}:\n" \
                                                f"{self.output()[-3000:]}"
            time.sleep(0.05)

    def wait_healthy(self, base: str, timeout_s: float = 60) -> None:
        """Until the server at ``base`` answers 200 on /healthz; its log when it dies or never
        does."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.alive, self.output()[-3000:]
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not answer in time:\n{self.output()[-3000:]}")
