"""A redis-server of the test's own on a free port of 127.0.0.1, without persistence: ``restart``
comes back empty (every stream, consumer group, pending entry and gateway key gone), as a Redis
restarted without RDB or AOF does in production."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType

import redis

from tests.support.peers import free_port, poll

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    """``with RedisServer(tmp_path) as server:`` then ``server.url``; ``restart()`` loses it all."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.restarts = 0
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)

    def start(self) -> RedisServer:
        log = (self.workdir / "redis-server.log").open("ab")
        self._popen = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        client = self.client()
        try:
            poll(lambda: self._answers(client), 10, f"redis-server on port {self.port}", 0.05)
        finally:
            client.close()
        return self

    def stop(self) -> None:
        if self._popen is not None and self._popen.poll() is None:
            self._popen.terminate()
            self._popen.wait(10)
        self._popen = None

    def restart(self) -> None:
        """Stop and start again on the same port: nothing survives (no persistence)."""
        self.stop()
        self.start()
        self.restarts += 1

    def _answers(self, client: redis.Redis) -> bool:
        assert self._popen is not None and self._popen.poll() is None, "redis-server exited"
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, _type: type[BaseException] | None, _exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.stop()
