"""The closed loop inside one process (``opsgate serve``, ``opsgate demo``): a relay thread moves
outbox rows onto an in-process bus whose subscribers are the consumers, each behind a runner with
inbox dedup, retries and dead letters; a delivery watchdog thread sends again what a consumer has
not recorded within ``OPSGATE_DELIVERY_BOUND_S``. Production splits the same pieces into
``opsgate relay`` and ``opsgate consume`` processes on Redis Streams (see ``core.cli``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from types import TracebackType

from core.bootstrap import App
from core.consumers import build_consumers
from core.db.database import is_sqlite
from core.errors import InternalError
from core.loop_processes import delivery_watchdog
from core.messaging import outbox
from core.messaging.bus import InProcessBus
from core.messaging.consumer import Consumer, ConsumerRunner
from core.messaging.relay import OutboxRelay
from core.messaging.supervisor import Supervisor

log = logging.getLogger(__name__)


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
        self.watchdog = delivery_watchdog(app, self.consumers)
        self.poll_s = settings.loop_poll_s
        self._stop = threading.Event()
        self._workers: Supervisor | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> InProcessLoop:
        if self._workers is not None:
            raise InternalError("the in-process loop is already running")
        self._stop.clear()
        idle_poll_s = self.poll_s if is_sqlite(self.app.engine) else None
        self._workers = Supervisor(self._stop, "in-process loop")
        self._workers.start("opsgate-loop", partial(self.relay.run, idle_poll_s=idle_poll_s),
                            restart_after_s=self.relay.poll_s)
        self._workers.start("opsgate-delivery", self.watchdog.run,
                            restart_after_s=self.watchdog.every_s)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the message in hand (a consumer is never cut off mid-effect)."""
        self._stop.set()
        if self._workers is not None:
            if not self._workers.join(timeout_s):
                log.warning("in-process loop: still busy after %.0fs; leaving it", timeout_s)
            self._workers = None

    @property
    def running(self) -> bool:
        return self._workers is not None and self._workers.alive

    def __enter__(self) -> InProcessLoop:
        return self.start()

    def __exit__(self, _type: type[BaseException] | None, _exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.stop()

    # -- observing ------------------------------------------------------------------------

    def unpublished(self) -> int:
        """Due outbox rows not yet handed to the bus."""
        return outbox.unpublished(self.app.engine)

    def wait_for(self, done: Callable[[], bool], timeout_s: float,
                 every_s: float = 0.02) -> bool:
        """Poll ``done`` until it holds or ``timeout_s`` passes; True when it held."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() >= deadline:
                return False
            time.sleep(every_s)
        return True
