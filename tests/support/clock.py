"""Time passing at the test's word: a clock the code under test reads (``Clock``), and the same
passage of time for keys whose lease Redis keeps (``let_redis_time_pass``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import redis


class Clock:
    """A clock the test moves by hand: the code reads ``now``, which stays put until the test
    sets it or ``advance``s it."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = datetime.now(UTC) if now is None else now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def let_redis_time_pass(client: redis.Redis, prefix: str, seconds: float) -> None:
    """Redis' clock cannot be moved: shorten the remaining TTL of every key under ``prefix`` by
    ``seconds``; a key whose TTL runs out is deleted, as Redis expires it."""
    passed_ms = int(seconds * 1000)
    for key in client.scan_iter(match=f"{prefix}*", count=500):
        left_ms = client.pttl(key)
        if left_ms < 0:  # no TTL (kept until deleted), or already gone
            continue
        if left_ms <= passed_ms:
            client.delete(key)
        else:
            client.pexpire(key, left_ms - passed_ms)
