"""A redis-server of the test's own on a free port of 127.0.0.1, without persistence: ``restart``
comes back empty (every stream, consumer group, pending entry and gateway key gone), as a Redis
restarted without RDB or AOF does in production."""

from __future__ import annotations

import shutil

import redis

from tests.support.own_server import OwnServer
from tests.support.peers import poll

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer(OwnServer):
    """``with RedisServer(tmp_path) as server:`` then ``server.url``; ``restart()`` loses it all."""

    log_name = "redis-server.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)

    def start(self) -> RedisServer:
        self._launch([REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--dir", str(self.workdir)])
        client = self.client()
        try:
            poll(lambda: self._answers(client), 10, f"redis-server on port {self.port}", 0.05)
        finally:
            client.close()
        return self

    def restart(self) -> None:
        """Stop and start again on the same port: nothing survives (no persistence)."""
        self.stop()
        self.start()
        self.restarts += 1

    def _answers(self, client: redis.Redis) -> bool:
        assert self._running(), "redis-server exited"
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
