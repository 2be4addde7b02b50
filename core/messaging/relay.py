"""The outbox relay: moves committed outbox rows onto the bus, at least once, in id order.

PostgreSQL: claims and marks a batch in one ``UPDATE … RETURNING`` whose subselect takes
``FOR UPDATE SKIP LOCKED`` (several relays never claim the same row), publishes, then commits, all
in one transaction (a failed publish rolls the marks back); woken by ``LISTEN`` on the
channel the outbox trigger notifies at commit, with polling as the floor, so a lost notification
costs only latency. A rolled-back transaction never notifies and its rows never exist.
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
from contextlib import suppress
from datetime import UTC, datetime

import psycopg
from sqlalchemy import ColumnElement, Connection, Engine, func, or_, select, update
from sqlalchemy.exc import SQLAlchemyError

from core.db.case_store import as_utc
from core.db.tables import outbox
from core.messaging.bus import Bus
from core.messaging.envelope import Envelope
from core.metrics import OUTBOX_PUBLISH

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "opsgate_outbox"


def utcnow() -> datetime:
    return datetime.now(UTC)


def due(now: datetime) -> ColumnElement[bool]:
    """Unpublished outbox rows the relay may hand out at ``now``: not scheduled, or due. ``now``
    is bound in UTC (SQLite stores a datetime's wall time and drops its zone)."""
    return (outbox.c.published_at.is_(None)
            & or_(outbox.c.deliver_after.is_(None),
                  outbox.c.deliver_after <= now.astimezone(UTC)))


class OutboxRelay:
    """Publishes unpublished outbox rows to ``bus``; ``run`` loops until stopped."""

    def __init__(self, engine: Engine, bus: Bus, *, batch_size: int = 200,
                 poll_s: float = 1.0, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.bus = bus
        self.batch_size = batch_size
        self.poll_s = poll_s
        self.clock = clock
        self._locking = engine.dialect.name == "postgresql"

    def relay_batch(self) -> int:
        """Publish one batch; returns how many rows it moved."""
        if self._locking:
            with self.engine.begin() as conn:
                return self._claim_publish_mark(conn)
        with self.engine.connect() as conn:
            claimed = self._claim(conn)
            conn.rollback()
        if not claimed:
            return 0
        envelopes = [envelope for envelope, _attempts in claimed]
        # Published outside any transaction: SQLite's write lock would block the in-process
        # consumers' own writes until the busy timeout.
        self.bus.publish(envelopes)
        with self.engine.begin() as conn:
            return self._mark(conn, claimed)

    def drain(self) -> int:
        """Publish until nothing is left; returns the total moved."""
        total = 0
        while moved := self.relay_batch():
            total += moved
        return total

    def run(self, stop: threading.Event) -> None:
        """Relay until ``stop`` is set: a full batch goes again at once, otherwise wait for a
        notification or the poll period."""
        with _Waker(self.engine) as waker:
            while not stop.is_set():
                try:
                    moved = self.relay_batch()
                except (SQLAlchemyError, OSError, ConnectionError) as exc:
                    log.warning("outbox relay: %s; retrying in %.1fs", exc, self.poll_s)
                    OUTBOX_PUBLISH.labels(topic="*", status="error").inc()
                    stop.wait(self.poll_s)
                    continue
                if moved < self.batch_size:
                    waker.wait(self._idle_s(), stop)

    def _idle_s(self) -> float:
        """How long to wait for work: the poll period, or less when a scheduled row falls due
        sooner (its NOTIFY came when it was written, not when it is due)."""
        now = self.clock()
        query = (select(func.min(outbox.c.deliver_after))
                 .where(outbox.c.published_at.is_(None),
                        outbox.c.deliver_after > now.astimezone(UTC)))
        try:
            with self.engine.connect() as conn:
                soonest = conn.execute(query).scalar()
        except SQLAlchemyError:
            return self.poll_s
        if soonest is None:
            return self.poll_s
        return max(0.0, min(self.poll_s, (as_utc(soonest) - now).total_seconds()))

    def _claim(self, conn: Connection) -> list[tuple[Envelope, int]]:
        """Due unpublished rows, each with its ``attempts`` as read (``_mark`` compares it)."""
        query = (select(outbox.c.id, outbox.c.topic, outbox.c.key, outbox.c.payload,
                        outbox.c.attempts)
                 .where(due(self.clock()))
                 .order_by(outbox.c.id)
                 .limit(self.batch_size))
        return [(Envelope(row.id, row.topic, row.key, dict(row.payload)), row.attempts)
                for row in conn.execute(query)]

    def _claim_publish_mark(self, conn: Connection) -> int:
        """PostgreSQL: claim and mark in one statement (one round trip, not two), publish, and
        let the commit make it so; a failed publish rolls the marks back with the claim."""
        claimable = (select(outbox.c.id)
                     .where(due(self.clock()))
                     .order_by(outbox.c.id)
                     .limit(self.batch_size)
                     .with_for_update(skip_locked=True))
        marked = conn.execute(
            update(outbox)
            .where(outbox.c.id.in_(claimable))
            .values(published_at=datetime.now(UTC), attempts=outbox.c.attempts + 1)
            .returning(outbox.c.id, outbox.c.topic, outbox.c.key, outbox.c.payload)
        )
        # RETURNING has no order: the bus gets the batch in id (commit) order.
        envelopes = sorted((Envelope(row.id, row.topic, row.key, dict(row.payload))
                            for row in marked.all()), key=lambda envelope: envelope.message_id)
        if envelopes:
            self.bus.publish(envelopes)
        self._count(envelopes)
        return len(envelopes)

    def _mark(self, conn: Connection, claimed: list[tuple[Envelope, int]]) -> int:
        """Mark the claimed rows published, unless a row was handed out again meanwhile (a
        dead letter requeued while its first delivery ran bumps ``attempts``): that one stays
        unpublished, so the requeue is not lost."""
        for attempts in {seen for _envelope, seen in claimed}:
            conn.execute(
                update(outbox)
                .where(outbox.c.id.in_([e.message_id for e, seen in claimed if seen == attempts]))
                .where(outbox.c.published_at.is_(None), outbox.c.attempts == attempts)
                .values(published_at=datetime.now(UTC), attempts=outbox.c.attempts + 1)
            )
        self._count([envelope for envelope, _attempts in claimed])
        return len(claimed)

    @staticmethod
    def _count(envelopes: list[Envelope]) -> None:
        for topic, published in Counter(envelope.topic for envelope in envelopes).items():
            OUTBOX_PUBLISH.labels(topic=topic, status="published").inc(published)


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
