"""The closed loop as production runs it, on Redis Streams: ``opsgate relay`` moves committed
outbox rows onto one stream per topic, ``opsgate consume`` feeds consumers from their consumer
groups. Both stop cleanly on SIGTERM/SIGINT (after the batch or message in hand) and print a
progress line now and then."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

import redis
from sqlalchemy import Engine, update

from core.bootstrap import App
from core.db.tables import outbox
from core.loop import unpublished
from core.messaging import inbox
from core.messaging.bus import Bus, RedisStreamsBus
from core.messaging.consumer import Consumer, ConsumerRunner
from core.messaging.envelope import Envelope
from core.messaging.relay import OutboxRelay
from core.messaging.streams import StreamConsumer
from core.settings import Settings

log = logging.getLogger(__name__)

STREAM_BLOCK_MS = 1000
"""How long one XREADGROUP waits for new entries: also the longest a stop waits for a consumer."""


def streams_client(url: str) -> redis.Redis:
    """A client for the streams: its socket timeout outlasts a blocking XREADGROUP."""
    timeout_s = STREAM_BLOCK_MS / 1000 + 5
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=5,
                                health_check_interval=30)


def stream_bus(settings: Settings, client: redis.Redis) -> RedisStreamsBus:
    return RedisStreamsBus(client, prefix=settings.stream_prefix)


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT ask the process to stop after the work in hand."""

    def _stop(signum: int, _frame: object) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


# -- the relay -------------------------------------------------------------------------------


class CountingBus:
    """A bus that counts what it published, for the progress lines."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.published = 0

    def publish(self, envelopes: Sequence[Envelope]) -> None:
        self.bus.publish(envelopes)
        self.published += len(envelopes)


def run_relay(app: App, bus: Bus, stop: threading.Event, out: TextIO, *,
              progress_every_s: float = 10.0) -> int:
    """Relay until ``stop`` is set; returns how many messages this process published."""
    settings = app.settings
    counting = CountingBus(bus)
    relay = OutboxRelay(app.engine, counting, batch_size=settings.relay_batch_size,
                        poll_s=settings.relay_poll_s)
    worker = threading.Thread(target=_relay_until, args=(relay, stop), name="opsgate-relay",
                              daemon=True)
    started, reported = time.monotonic(), 0
    worker.start()
    while not stop.wait(progress_every_s):
        if not worker.is_alive():
            raise RuntimeError("the relay thread died; see the log above")
        if counting.published != reported:
            reported = counting.published
            rate = reported / max(time.monotonic() - started, 1e-9)
            print(f"relay: {reported} messages published ({rate:.1f}/s), "
                  f"{unpublished(app.engine)} waiting", file=out, flush=True)
    worker.join(settings.relay_poll_s + 30)
    return counting.published


def _relay_until(relay: OutboxRelay, stop: threading.Event) -> None:
    # The relay retries database and socket errors itself; anything else (a Redis error, a bug)
    # would end its thread and, silently, the whole loop: log it and go on after a poll period.
    while not stop.is_set():
        try:
            relay.run(stop)
        except Exception:
            log.exception("outbox relay failed; going on in %.1fs", relay.poll_s)
            stop.wait(relay.poll_s)


# -- the consumers ---------------------------------------------------------------------------


class CountingRunner(ConsumerRunner):
    """A consumer runner that counts its outcomes (done, duplicate, dead)."""

    def __init__(self, engine: Engine, consumer: Consumer, *, max_attempts: int) -> None:
        super().__init__(engine, consumer, max_attempts=max_attempts)
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()

    def deliver(self, envelope: Envelope) -> str:
        outcome = super().deliver(envelope)
        with self._lock:
            self.outcomes[outcome] += 1
        return outcome


def select_consumers(consumers: Sequence[Consumer], names: Sequence[str]) -> list[Consumer]:
    """The consumers called ``names`` (all of them when empty); ``KeyError`` names the unknown."""
    if not names:
        return list(consumers)
    by_name = {consumer.name: consumer for consumer in consumers}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise KeyError(f"unknown consumer {', '.join(unknown)}; known: {', '.join(by_name)}")
    return [by_name[name] for name in dict.fromkeys(names)]


@dataclass
class ConsumerProcess:
    """The stream consumers of one ``opsgate consume`` process, a thread each."""

    app: App
    bus: RedisStreamsBus
    consumers: Sequence[Consumer]
    workers: int = 1
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    runners: list[CountingRunner] = field(default_factory=list)

    def run(self, stop: threading.Event, out: TextIO, *, progress_every_s: float = 10.0) -> None:
        threads = self._start(stop)
        reported: dict[str, int] = {}
        while not stop.wait(progress_every_s):
            if not any(thread.is_alive() for thread in threads):
                raise RuntimeError("every consumer thread died; see the log above")
            line = self.progress()
            counts = {runner.consumer.name: sum(runner.outcomes.values())
                      for runner in self.runners}
            if counts != reported:
                reported = counts
                print(f"consume: {line}", file=out, flush=True)
        for thread in threads:
            thread.join(STREAM_BLOCK_MS / 1000 + 30)

    def progress(self) -> str:
        return "; ".join(
            f"{runner.consumer.name} {runner.outcomes['done']} done"
            + (f", {runner.outcomes['duplicate']} duplicate" if runner.outcomes["duplicate"]
               else "")
            + (f", {runner.outcomes['dead']} dead" if runner.outcomes["dead"] else "")
            for runner in self.runners)

    def _start(self, stop: threading.Event) -> list[threading.Thread]:
        settings = self.app.settings
        claim_idle_ms = int(settings.stream_claim_idle_s * 1000)
        threads = []
        for consumer in self.consumers:
            runner = CountingRunner(self.app.engine, consumer,
                                    max_attempts=settings.consumer_max_attempts)
            self.runners.append(runner)
            for worker in range(self.workers):
                stream = StreamConsumer(self.bus, runner, block_ms=STREAM_BLOCK_MS,
                                        claim_idle_ms=claim_idle_ms,
                                        name=f"{self.name}-{worker}")
                stream.ensure_groups()
                thread = threading.Thread(target=_consume, args=(stream, stop),
                                          name=f"consume-{consumer.name}-{worker}", daemon=True)
                thread.start()
                threads.append(thread)
        return threads


def _consume(stream: StreamConsumer, stop: threading.Event) -> None:
    # One consumer's unexpected failure must not end the others' threads: log it and go on.
    while not stop.is_set():
        try:
            stream.run(stop)
        except Exception:
            log.exception("%s: consumer loop failed; restarting in 1s", stream.group)
            stop.wait(1.0)


# -- dead letters ----------------------------------------------------------------------------


def requeue_dead_letter(app: App, dead_letter_id: int,
                        direct: Callable[[Envelope], None] | None = None) -> Envelope | None:
    """Deliver dead letter ``dead_letter_id`` to its consumer again: its inbox entry is forgotten
    and its outbox row marked unpublished, so whichever relay runs publishes it again (other
    consumers of the topic skip it by their inbox). When the outbox row is gone, ``direct``
    publishes it. Returns the message, or None when there is no such dead letter."""
    with app.engine.begin() as conn:
        envelope = inbox.requeue(conn, dead_letter_id, datetime.now(UTC))
        if envelope is None:
            return None
        # attempts + 1: a relay still publishing the row's last delivery must not mark it
        # published over this requeue (relay._mark compares attempts).
        reset = conn.execute(update(outbox).where(outbox.c.id == envelope.message_id)
                             .values(published_at=None, attempts=outbox.c.attempts + 1))
    if reset.rowcount == 0:
        if direct is None:
            raise LookupError(f"message {envelope.message_id} is no longer in the outbox and "
                              "no bus is configured to publish it directly")
        direct(envelope)
    return envelope
