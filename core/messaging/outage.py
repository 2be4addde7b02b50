"""A long-running worker's view of a lost dependency (the database, Redis): it waits longer after
each failure in a row (exponential backoff, capped), says so in the log when the outage begins
and when it ends, and counts it in ``opsgate_worker_outage`` for dashboards. Nothing here ends
a process: a transient error is retried until the dependency answers again."""

from __future__ import annotations

import logging
import time

import psycopg
import redis
from sqlalchemy.exc import SQLAlchemyError

from core.errors import Unavailable
from core.metrics import WORKER_OUTAGE

log = logging.getLogger(__name__)

TRANSIENT: tuple[type[BaseException], ...] = (
    SQLAlchemyError, psycopg.Error, redis.RedisError, OSError, ConnectionError, Unavailable)
"""What a worker retries instead of dying: database, Redis and socket errors, and ``Unavailable``
(a dependency translated at its boundary)."""


class Outage:
    """Backoff and log lines for one worker: ``failed(exc)`` returns how long to wait."""

    transient = TRANSIENT

    def __init__(self, worker: str, *, first_s: float = 0.5, max_s: float = 15.0) -> None:
        self.worker = worker
        self.first_s = first_s
        self.max_s = max(max_s, first_s)
        self.failures = 0
        self.since = 0.0

    def failed(self, exc: BaseException) -> float:
        """Record one failure; the wait before the next try (doubling, up to ``max_s``)."""
        wait_s: float = min(self.first_s * 2 ** self.failures, self.max_s)
        if self.failures == 0:
            self.since = time.monotonic()
            WORKER_OUTAGE.labels(worker=self.worker).set(1)
        self.failures += 1
        log.warning("%s: %s; retrying in %.1fs (try %d; the process keeps running)",
                    self.worker, _first_line(exc), wait_s, self.failures)
        return wait_s

    def recovered(self) -> None:
        """The dependency answered: log the end of an outage, if there was one."""
        if self.failures:
            log.warning("%s: working again after %.1fs and %d failed tries", self.worker,
                        time.monotonic() - self.since, self.failures)
            WORKER_OUTAGE.labels(worker=self.worker).set(0)
            self.failures = 0

    @property
    def ongoing(self) -> bool:
        return self.failures > 0


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
