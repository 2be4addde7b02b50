"""The closed loop inside one process (``opsgate serve``, ``opsgate demo``): a relay thread moves
outbox rows onto an in-process bus whose subscribers are the consumers, each behind a runner with
inbox dedup, retries and dead letters. Production splits the same pieces into ``opsgate relay``
and ``opsgate consume`` processes on Redis Streams (see ``core.cli``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import SQLAlchemyError

from core.bootstrap import App
from core.consumers import build_consumers
from core.db.database import is_sqlite
from core.db.tables import outbox
from core.messaging.bus import InProcessBus
from core.messaging.consumer import Consumer, ConsumerRunner
from core.messaging.relay import OutboxRelay, due, utcnow

log = logging.getLogger(__name__)


def unpublished(engine: Engine, now: datetime | None = None) -> int:
    """Due outbox rows not yet handed to the bus (by any relay): the relay's work in hand. Rows
    scheduled for later (a verification's next reading) are not counted until due."""
    with engine.connect() as conn:
        query = select(func.count()).select_from(outbox).where(due(now or utcnow()))
        return int(conn.execute(query).scalar_one())


class InProcessLoop:
    """Relay + in-process bus + one runner per consumer, on a thread of its own.

    On PostgreSQL the relay sleeps until the outbox trigger's NOTIFY (or its poll floor); on
    SQLite, which cannot notify, it goes again at once after every batch (the consumers it just
    ran usually wrote the next messages) and polls every ``loop_poll_s`` when idle.
    """

    def __init__(self, app: App, consumers: Sequence[Consumer] | None = None) -> None:
        settings = app.settings
        self.app = app
        self.bus = InProcessBus()
        self.consumers = list(build_consumers(app) if consumers is None else consumers)
        self.runners = [ConsumerRunner(app.engine, consumer,
                                       max_attempts=settings.consumer_max_attempts)
                        for consumer in self.consumers]
        for runner in self.runners:
            self.bus.subscribe(runner.consumer.topics, runner)
        self.relay = OutboxRelay(app.engine, self.bus, batch_size=settings.relay_batch_size,
                                 poll_s=settings.relay_poll_s)
        self.poll_s = settings.loop_poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> InProcessLoop:
        if self._thread is not None:
            raise RuntimeError("the in-process loop is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="opsgate-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the message in hand (a consumer is never cut off mid-effect)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("in-process loop: still busy after %.0fs; leaving it", timeout_s)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> InProcessLoop:
        return self.start()

    def __exit__(self, _type: type[BaseException] | None, _exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.stop()

    # -- observing ------------------------------------------------------------------------

    def unpublished(self) -> int:
        """Due outbox rows not yet handed to the bus."""
        return unpublished(self.app.engine)

    def wait_for(self, done: Callable[[], bool], timeout_s: float,
                 every_s: float = 0.02) -> bool:
        """Poll ``done`` until it holds or ``timeout_s`` passes; True when it held."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() >= deadline:
                return False
            time.sleep(every_s)
        return True

    # -- the relay thread -----------------------------------------------------------------

    def _run(self) -> None:
        # The loop's thread must outlive any one failure: a dead relay would silently stop
        # every case, so whatever escapes is logged and the loop goes on after the poll period.
        while not self._stop.is_set():
            try:
                if is_sqlite(self.app.engine):
                    self._relay_sqlite()
                else:
                    self.relay.run(self._stop)
            except Exception:
                log.exception("in-process loop: the relay failed; going on in %.1fs",
                              self.relay.poll_s)
                self._stop.wait(self.relay.poll_s)

    def _relay_sqlite(self) -> None:
        while not self._stop.is_set():
            try:
                moved = self.relay.relay_batch()
            except (SQLAlchemyError, OSError) as exc:
                log.warning("in-process loop: %s; retrying in %.1fs", exc, self.relay.poll_s)
                self._stop.wait(self.relay.poll_s)
                continue
            if not moved:
                self._stop.wait(self.poll_s)
