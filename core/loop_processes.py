"""The closed loop as production runs it, on Redis Streams or NATS JetStream: ``opsgate relay``
moves committed outbox rows onto one stream per topic, ``opsgate consume`` feeds consumers from
their consumer groups (Redis) or durable consumers (JetStream). Both stop cleanly on
SIGTERM/SIGINT (after the batch or message in hand) and print a progress line now and then."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

import redis
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from core.bootstrap import App
from core.consumers import subscriptions
from core.messaging import delivery, heartbeat, inbox, outbox
from core.messaging.bus import Bus, RedisStreamsBus
from core.messaging.consumer import Consumer, ConsumerRunner
from core.messaging.delivery import DeliveryWatchdog, subscribers
from core.messaging.envelope import Envelope
from core.messaging.heartbeat import Heartbeat, Polls, Role
from core.messaging.jetstream.bus import JetStreamBus
from core.messaging.jetstream.config import JetStreamConfig
from core.messaging.jetstream.reader import readers
from core.messaging.relay import OutboxRelay
from core.messaging.streams import StreamConsumer
from core.messaging.supervisor import Supervisor
from core.settings import Settings

STREAM_BLOCK_MS = 1000
"""How long one XREADGROUP waits for new entries: also the longest a stop waits for a consumer."""


def streams_client(url: str) -> redis.Redis:
    """A client for the streams: its socket timeout outlasts a blocking XREADGROUP."""
    timeout_s = STREAM_BLOCK_MS / 1000 + 5
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=5,
                                health_check_interval=30)


def stream_bus(settings: Settings, client: redis.Redis) -> RedisStreamsBus:
    return RedisStreamsBus(client, prefix=settings.stream_prefix)


def jetstream_bus(settings: Settings, name: str) -> JetStreamBus:
    """The JetStream bus of ``settings`` (OPSGATE_BUS_URL), connected; ``close()`` it."""
    return JetStreamBus(JetStreamConfig.of(settings),
                        name=f"opsgate-{name}-{socket.gethostname()}-{os.getpid()}").connect()


# -- the heartbeat ---------------------------------------------------------------------------

LAG_EVERY_S = 10.0
"""How often a heartbeat measures its lag again (a query): the loops' polls are stamped live."""


class HeartbeatWriter:
    """Writes a process's heartbeat (``core.messaging.heartbeat``) each time it is called:
    its loops' last polls, and its lag measured at most every ``LAG_EVERY_S``."""

    def __init__(self, settings: Settings, role: Role, polls: Polls,
                 lag: Callable[[datetime], float]) -> None:
        self.path = heartbeat.heartbeat_path(settings.heartbeat_dir, role)
        self.role, self.polls, self.lag = role, polls, lag
        self._lag: tuple[float | None, str] = (None, "lag not measured yet")
        self._measured = 0.0

    def __call__(self) -> None:
        if time.monotonic() - self._measured >= LAG_EVERY_S:
            self._lag = self._measure()
            self._measured = time.monotonic()
        lag_s, note = self._lag
        Heartbeat(self.role, os.getpid(), time.time(), self.polls.snapshot(), lag_s,
                  note).write(self.path)

    def _measure(self) -> tuple[float | None, str]:
        try:
            return self.lag(datetime.now(UTC)), ""
        except SQLAlchemyError:
            return None, "lag unknown: the database is unreachable"


def watch_with_heartbeat(workers: Supervisor, beat: HeartbeatWriter, report: Callable[[], None],
                         progress_every_s: float) -> None:
    """Write the heartbeat every ``heartbeat.EVERY_S`` and ``report`` progress every
    ``progress_every_s``, until the workers stop."""
    beat()
    reported = time.monotonic()

    def tick() -> None:
        nonlocal reported
        beat()
        if time.monotonic() - reported >= progress_every_s:
            reported = time.monotonic()
            report()

    workers.watch(min(heartbeat.EVERY_S, progress_every_s), tick)


def relay_lag_s(engine: Engine, now: datetime) -> float:
    """How long the oldest due outbox row has waited for a relay (0 when none waits)."""
    oldest, _waiting = outbox.oldest_unpublished(engine, now)
    return 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())


def consumers_lag_s(engine: Engine, consumers: Sequence[Consumer], now: datetime) -> float:
    """How long the oldest published message of these consumers' topics has waited for one of
    them to record it (0 when none waits)."""
    topics = subscribers({consumer.name: consumer.topics for consumer in consumers})
    late = delivery.look(engine, topics, now, bound_s=0).late
    return max((message.waited_s(now) for message in late), default=0.0)


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
    counting, polls = CountingBus(bus), Polls()
    relay = OutboxRelay(app.engine, counting, batch_size=settings.relay_batch_size,
                        poll_s=settings.relay_poll_s, polls=polls)
    workers = Supervisor(stop, "relay")
    workers.start("opsgate-relay", relay.run, restart_after_s=relay.poll_s)
    watchdog = delivery_watchdog(app)
    workers.start("opsgate-delivery", watchdog.run, restart_after_s=watchdog.every_s)
    started, reported = time.monotonic(), 0

    def report() -> None:
        nonlocal reported
        if counting.published != reported:
            reported = counting.published
            rate = reported / max(time.monotonic() - started, 1e-9)
            print(f"relay: {reported} messages published ({rate:.1f}/s), "
                  f"{_waiting(app.engine)}", file=out, flush=True)

    beat = HeartbeatWriter(settings, "relay", polls,
                           lambda now: relay_lag_s(app.engine, now))
    watch_with_heartbeat(workers, beat, report, progress_every_s)
    workers.join(settings.relay_poll_s + 30)
    return counting.published


def delivery_watchdog(app: App, consumers: Sequence[Consumer] | None = None) -> DeliveryWatchdog:
    """The watchdog of a relay: every consumer (or those given) must record each message of
    its topics within ``OPSGATE_DELIVERY_BOUND_S``, or the message is sent again."""
    topics_of = (subscriptions() if consumers is None
                 else {consumer.name: consumer.topics for consumer in consumers})
    return DeliveryWatchdog(app.engine, subscribers(topics_of),
                            bound_s=app.settings.delivery_bound_s)


def _waiting(engine: Engine) -> str:
    """How many due rows wait for a relay, as a progress line says it."""
    try:
        return f"{outbox.unpublished(engine)} waiting"
    except SQLAlchemyError:
        return "the database is unreachable (retrying)"


# -- the consumers ---------------------------------------------------------------------------


class CountingRunner(ConsumerRunner):
    """A consumer runner that counts its outcomes (done, duplicate, dead)."""

    def __init__(self, engine: Engine, consumer: Consumer, *, max_attempts: int) -> None:
        super().__init__(engine, consumer, max_attempts=max_attempts)
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()

    def deliver(self, envelope: Envelope) -> str:
        return self._count(super().deliver(envelope))

    def give_up(self, envelope: Envelope, error: str, attempts: int) -> str:
        return self._count(super().give_up(envelope, error, attempts))

    def _count(self, outcome: str) -> str:
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
    bus: RedisStreamsBus | JetStreamBus
    consumers: Sequence[Consumer]
    workers: int = 1
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    runners: list[CountingRunner] = field(default_factory=list)
    polls: Polls = field(default_factory=Polls)

    def run(self, stop: threading.Event, out: TextIO, *, progress_every_s: float = 10.0) -> None:
        workers = self._start(stop)
        reported: dict[str, int] = {}

        def report() -> None:
            nonlocal reported
            counts = {runner.consumer.name: sum(runner.outcomes.values())
                      for runner in self.runners}
            if counts != reported:
                reported = counts
                print(f"consume: {self.progress()}", file=out, flush=True)

        beat = HeartbeatWriter(self.app.settings, "consume", self.polls,
                               lambda now: consumers_lag_s(self.app.engine, self.consumers, now))
        watch_with_heartbeat(workers, beat, report, progress_every_s)
        workers.join(STREAM_BLOCK_MS / 1000 + 30)

    def progress(self) -> str:
        return "; ".join(
            f"{runner.consumer.name} {runner.outcomes['done']} done"
            + (f", {runner.outcomes['duplicate']} duplicate" if runner.outcomes["duplicate"]
               else "")
            + (f", {runner.outcomes['dead']} dead" if runner.outcomes["dead"] else "")
            for runner in self.runners)

    def _start(self, stop: threading.Event) -> Supervisor:
        settings = self.app.settings
        claim_idle_ms = int(settings.stream_claim_idle_s * 1000)
        workers = Supervisor(stop, "consumer")
        for consumer in self.consumers:
            runner = CountingRunner(self.app.engine, consumer,
                                    max_attempts=settings.consumer_max_attempts)
            self.runners.append(runner)
            if isinstance(self.bus, JetStreamBus):
                # Each reader creates (or checks) its durable consumer in its own loop, retried
                # there: a server lost while this process starts must not end it.
                for worker in range(self.workers):
                    for reader in readers(self.bus, runner, self.polls):
                        workers.start(f"consume-{consumer.name}-{reader.topic}-{worker}",
                                      reader.run, restart_after_s=1.0)
                continue
            for worker in range(self.workers):
                stream = StreamConsumer(self.bus, runner, block_ms=STREAM_BLOCK_MS,
                                        claim_idle_ms=claim_idle_ms,
                                        name=f"{self.name}-{worker}", polls=self.polls)
                stream.ensure_groups()
                # One consumer's unexpected failure must not end the others' threads.
                workers.start(f"consume-{consumer.name}-{worker}", stream.run,
                              restart_after_s=1.0)
        return workers


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
        reset = outbox.mark_unpublished(conn, envelope.message_id)
    if not reset:
        if direct is None:
            raise LookupError(f"message {envelope.message_id} is no longer in the outbox and "
                              "no bus is configured to publish it directly")
        direct(envelope)
    return envelope
