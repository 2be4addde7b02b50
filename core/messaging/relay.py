"""The outbox relay: moves committed outbox rows onto the bus, at least once, in id order.

PostgreSQL: claims and marks a batch in one ``UPDATE … RETURNING`` whose subselect takes
``FOR UPDATE SKIP LOCKED`` (several relays never claim the same row), publishes, then commits, all
in one transaction (a failed publish rolls the marks back); woken by ``LISTEN`` on the
channel the outbox trigger notifies at commit, with polling as the floor, so a lost notification
costs only latency. A rolled-back transaction never notifies and its rows never exist.
While batches come full, the next batch's claim runs while the current one is published (on a
second connection; its rows are not the current batch's, which are locked): a batch is
published only once the one before it committed, and a failed publish rolls back both the batch
and the one claimed behind it.
SQLite (embedded, one relay): reads a batch, publishes, then marks it, so the in-process bus can
run consumers that write to the same database without holding its write lock.
A row with ``deliver_after`` (a verification's next reading) is not claimed before that time; due
rows behind it still flow, in id order. An idle relay wakes when the soonest one falls due.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from core.clock import Clock, utcnow
from core.messaging import outbox
from core.messaging.bus import Bus
from core.messaging.envelope import Envelope
from core.messaging.heartbeat import Polls
from core.messaging.outage import Outage
from core.metrics import OUTBOX_PUBLISH

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "opsgate_outbox"
PASS_BATCHES = 10
"""Most batches one pass of ``run`` relays back to back before it stamps its heartbeat again."""

Claim = tuple[Connection, list[Envelope]]
"""A claimed and marked batch, its transaction still open on the connection."""


class OutboxRelay:
    """Publishes unpublished outbox rows to ``bus``; ``run`` loops until stopped."""

    def __init__(self, engine: Engine, bus: Bus, *, batch_size: int = 200,
                 poll_s: float = 1.0, clock: Clock = utcnow, polls: Polls | None = None) -> None:
        self.engine = engine
        self.polls = polls  # each pass of ``run`` stamps it: the process's heartbeat
        self.bus = bus
        self.batch_size = batch_size
        self.poll_s = poll_s
        self.clock = clock
        self._locking = engine.dialect.name == "postgresql"
        # Set while ``run`` waits for work (on PostgreSQL its LISTEN is in place by then): a
        # caller can tell an idle relay from one still starting or busy.
        self.idle = threading.Event()
        self._publisher: ThreadPoolExecutor | None = None

    def relay_batch(self) -> int:
        """Publish one batch; returns how many rows it moved."""
        if self._locking:
            with self.engine.begin() as conn:
                envelopes = outbox.claim_and_mark(conn, self.clock(), self.batch_size)
                if envelopes:  # a failed publish rolls the marks back with the claim
                    self.bus.publish(envelopes)
            self._count(envelopes)
            return len(envelopes)
        with self.engine.connect() as conn:
            claimed = outbox.claim(conn, self.clock(), self.batch_size)
            conn.rollback()
        if not claimed:
            return 0
        envelopes = [envelope for envelope, _attempts in claimed]
        # Published outside any transaction: SQLite's write lock would block the in-process
        # consumers' own writes until the busy timeout.
        self.bus.publish(envelopes)
        with self.engine.begin() as conn:
            outbox.mark(conn, claimed)
        self._count(envelopes)
        return len(claimed)

    def relay_batches(self, most: int = PASS_BATCHES) -> int:
        """Publish batches until one is not full (at most ``most``); returns how many rows
        moved. On PostgreSQL each batch's publish overlaps the next batch's claim."""
        if not self._locking:
            return self.relay_batch()
        if self._publisher is None:
            self._publisher = ThreadPoolExecutor(1, thread_name_prefix="relay-publish")
        moved, current = 0, self._claim()
        try:
            for left in range(most - 1, -1, -1):
                conn, envelopes = current
                if not envelopes:
                    break
                publishing = self._publisher.submit(self.bus.publish, envelopes)
                following = None
                try:
                    if left and len(envelopes) == self.batch_size:
                        following = self._claim()
                    publishing.result()
                    conn.commit()
                except BaseException:
                    _settled(publishing)  # nothing of this batch still in flight
                    if following is not None:
                        following[0].close()  # rolled back, never published
                    raise
                self._count(envelopes)
                moved += len(envelopes)
                if following is None:
                    break
                conn.close()
                current = following
        finally:
            current[0].close()  # a batch not committed is rolled back
        return moved

    def _claim(self) -> Claim:
        conn = self.engine.connect()
        try:
            conn.begin()
            return conn, outbox.claim_and_mark(conn, self.clock(), self.batch_size)
        except BaseException:
            conn.close()
            raise

    def drain(self) -> int:
        """Publish until nothing is left; returns the total moved."""
        total = 0
        while moved := self.relay_batches():
            total += moved
        return total

    def run(self, stop: threading.Event, *, idle_poll_s: float | None = None) -> None:
        """Relay until ``stop`` is set: a full batch goes again at once, otherwise wait for a
        notification, the soonest scheduled row or the poll period. With ``idle_poll_s`` (the
        in-process loop on SQLite, which cannot notify) any batch goes again at once, as the
        consumers it just ran usually wrote the next messages, and an empty one waits that long.
        A lost database or bus is retried with backoff (from a tenth of the poll period up to
        15 s), said once in the log when it begins and once when it ends."""
        outage = Outage("outbox relay", first_s=self.poll_s / 10)
        with _Waker(self.engine) as waker:
            while not stop.is_set():
                if self.polls is not None:
                    self.polls.stamp("relay")
                try:
                    moved = self.relay_batches()
                except outage.transient as exc:
                    OUTBOX_PUBLISH.labels(topic="*", status="error").inc()
                    stop.wait(outage.failed(exc))
                    continue
                outage.recovered()
                if idle_poll_s is not None:
                    if not moved:
                        self._wait(lambda: stop.wait(idle_poll_s))
                elif moved < self.batch_size:
                    self._wait(lambda: waker.wait(self._idle_s(), stop))

    def _wait(self, wait: Callable[[], object]) -> None:
        """``wait`` for work, ``idle`` set meanwhile."""
        self.idle.set()
        try:
            wait()
        finally:
            self.idle.clear()

    def _idle_s(self) -> float:
        """How long to wait for work: the poll period, or less when a scheduled row falls due
        sooner (its NOTIFY came when it was written, not when it is due)."""
        now = self.clock()
        try:
            soonest = outbox.soonest_scheduled(self.engine, now)
        except SQLAlchemyError:
            return self.poll_s
        if soonest is None:
            return self.poll_s
        return max(0.0, min(self.poll_s, (soonest - now).total_seconds()))

    @staticmethod
    def _count(envelopes: list[Envelope]) -> None:
        for topic, published in Counter(envelope.topic for envelope in envelopes).items():
            OUTBOX_PUBLISH.labels(topic=topic, status="published").inc(published)


def _settled(publishing: Future[None]) -> None:
    """Wait until ``publishing`` ended, however it ended."""
    with suppress(BaseException):
        publishing.result()


class _Waker:
    """Waits for the outbox NOTIFY on PostgreSQL, or just sleeps; never longer than asked."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._listener: psycopg.Connection[tuple[object, ...]] | None = None

    def __enter__(self) -> _Waker:
        self._listen()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._listener is not None:
            with suppress(psycopg.Error):
                self._listener.close()

    def _listen(self) -> None:
        if self.engine.dialect.name != "postgresql":
            return
        url = self.engine.url.set(drivername="postgresql")
        try:
            self._listener = psycopg.connect(url.render_as_string(hide_password=False),
                                             autocommit=True)
            self._listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        except psycopg.Error as exc:
            log.warning("outbox relay: LISTEN unavailable (%s); polling only", exc)
            self._listener = None

    def wait(self, timeout: float, stop: threading.Event) -> None:
        """Return on a notification, on ``stop``, or after ``timeout``, whichever comes first."""
        if self._listener is None:
            stop.wait(timeout)
            return
        deadline = time.monotonic() + timeout
        try:
            # Short slices so a stop request is seen promptly even with a long poll period.
            while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
                if any(True for _ in self._notifications(min(left, 0.25))):
                    return
        except psycopg.Error as exc:
            log.warning("outbox relay: lost LISTEN connection (%s); reconnecting", exc)
            self._listener = None
            stop.wait(timeout)
            self._listen()

    def _notifications(self, timeout: float) -> Iterator[psycopg.Notify]:
        assert self._listener is not None
        yield from self._listener.notifies(timeout=timeout, stop_after=1)
