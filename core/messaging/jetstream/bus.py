"""The JetStream bus: one connection on an event loop of its own thread, and the operations the
relay, the readers and ``/readyz`` call on it, each run on that loop and waited for (their work is
in ``setup``, ``publisher``, ``reader`` and ``figures``).

A server that lost its store (restarted on an empty volume) is set up again by whoever meets the
loss: the relay's publication finds no stream and creates it, with the durable consumers this bus
made sure of, before publishing again; a reader finds its durable consumer gone and creates it
(and its stream) again (``JetStreamReader``)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import nats
import nats.errors
import nats.js.errors

from core.errors import Unavailable
from core.messaging.envelope import Envelope
from core.messaging.jetstream import figures, publisher, reader, setup
from core.messaging.jetstream.config import (
    JetStreamConfig,
    JetStreamSetupError,
    StreamMissing,
    first_line,
)

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext

log = logging.getLogger(__name__)

T = TypeVar("T")


class JetStreamBus:
    """A connection to JetStream on a loop thread of its own; ``connect()`` before use,
    ``close()`` after. Thread-safe: the relay and every reader of a process share one."""

    def __init__(self, config: JetStreamConfig, *, name: str = "opsgate") -> None:
        self.config = config
        self.name = name
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"jetstream-{name}")
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._streams: set[str] = set()
        self._consumers_of: dict[str, set[str]] = {}  # topic -> the consumers made sure of
        self._lock = threading.Lock()
        self.reconnects = 0

    # -- the connection ----------------------------------------------------------------------

    def connect(self) -> JetStreamBus:
        """Connect (reconnecting for ever after any later loss) and check that the server has
        JetStream; ``Unavailable`` when no server answers (or its JetStream does not: a cluster
        without a leader), ``JetStreamSetupError`` without JetStream."""
        self._thread.start()
        wait_s = self.config.timeout_s * 2
        try:
            self._call(self._connect(), wait_s)
        except Unavailable as exc:
            if exc.message.startswith("NATS at"):
                raise
            raise Unavailable(f"NATS at {self.config.shown} is not reachable: no answer within "
                              f"{wait_s:g}s") from exc
        return self

    async def _connect(self) -> None:
        async def error(exc: Exception) -> None:
            log.debug("jetstream (%s): %s", self.name, first_line(exc))

        async def disconnected() -> None:
            if self._nc is not None and self._nc.is_closed:
                return  # our own close()
            log.warning("jetstream (%s): disconnected from %s; reconnecting", self.name,
                        self.config.shown)

        async def reconnected() -> None:
            self.reconnects += 1  # the server may have come back without its store
            log.warning("jetstream (%s): reconnected", self.name)

        try:
            self._nc = await nats.connect(
                servers=list(self.config.servers), name=self.name,
                connect_timeout=int(max(1, self.config.timeout_s)), allow_reconnect=True,
                max_reconnect_attempts=-1, reconnect_time_wait=0.25,
                error_cb=error, disconnected_cb=disconnected, reconnected_cb=reconnected)
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            raise Unavailable(f"NATS at {self.config.shown} is not reachable: "
                              f"{first_line(exc)}") from exc
        self._js = self._nc.jetstream(timeout=self.config.timeout_s)
        try:
            await self._js.account_info()
        except nats.errors.TimeoutError as exc:
            # Answered by nobody in time: a cluster without its JetStream leader (most of its
            # nodes down, or still starting) looks like this, and it passes; retried.
            raise Unavailable(
                f"NATS at {self.config.shown} answers, but its JetStream did not within "
                f"{self.config.timeout_s:g}s: a cluster without a leader (a majority of its "
                "nodes down or still starting) or an overloaded server") from exc
        except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError) as exc:
            raise JetStreamSetupError(
                f"NATS at {self.config.shown} has no JetStream: start nats-server with -js "
                "(or jetstream {} in its configuration)") from exc

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    def close(self) -> None:
        if self._nc is not None and not self._nc.is_closed:
            with suppress(Unavailable):
                self._call(self._nc.close(), self.config.timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _call(self, coro: Awaitable[T], timeout_s: float) -> T:
        """Run ``coro`` on the bus's loop and wait for it; a NATS failure is ``Unavailable``
        (the workers retry it with backoff), a setup problem ``JetStreamSetupError``."""

        async def run() -> T:
            return await coro

        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            return future.result(timeout_s + 1)
        except (JetStreamSetupError, Unavailable):
            raise
        except nats.js.errors.NoStreamResponseError as exc:
            self._streams.clear()  # the stream is gone: created again before the next publish
            raise StreamMissing(f"JetStream at {self.config.shown} has no stream for the "
                                f"subject ({first_line(exc)})") from exc
        except (TimeoutError, nats.errors.Error, OSError, FutureTimeout) as exc:
            future.cancel()
            raise Unavailable(f"JetStream at {self.config.shown}: {first_line(exc)}") from exc

    @property
    def js(self) -> JetStreamContext:
        assert self._js is not None, "JetStreamBus.connect() first"
        return self._js

    # -- streams and consumers ---------------------------------------------------------------

    def ensure_streams(self, topics: Iterable[str]) -> None:
        """Create each topic's stream, or check the one there has the settings it needs (once
        per stream, until the server is found to have lost one)."""
        for topic in topics:
            if self.config.stream(topic) not in self._streams:
                self._ensure_stream(topic)

    def _ensure_stream(self, topic: str) -> None:
        """Create or check ``topic``'s stream; a stream created anew gets the durable consumers
        this bus made sure of on it back at once, before anything is published to it (a
        retention other than limits would drop a message no consumer was there to take)."""
        created = self._call(setup.ensure_stream(self.js, self.config, topic),
                             self.config.timeout_s)
        with self._lock:
            self._streams.add(self.config.stream(topic))
            consumers = sorted(self._consumers_of.get(topic, ()))
        if created:
            for consumer in consumers:
                self._ensure_consumer(consumer, topic)

    def ensure_consumers(self, topics_of: Mapping[str, Iterable[str]]) -> None:
        """Create (or update to the settings) each opsgate consumer's durable consumer on the
        stream of each of its topics; their streams first, checked on the server each time (this
        is how a reader sets up again what a server lost). The bus remembers them: a stream it
        creates again later gets them back."""
        for consumer, topics in topics_of.items():
            for topic in topics:
                with self._lock:
                    self._consumers_of.setdefault(topic, set()).add(consumer)
                self._ensure_stream(topic)
                self._ensure_consumer(consumer, topic)

    def _ensure_consumer(self, consumer: str, topic: str) -> None:
        self._call(setup.ensure_consumer(self.js, self.config, consumer, topic),
                   self.config.timeout_s)

    def has_consumer(self, consumer: str, topic: str) -> bool:
        """Whether ``consumer``'s durable consumer on ``topic``'s stream is on the server."""
        return self._call(setup.has_consumer(self.js, self.config, consumer, topic),
                          self.config.timeout_s)

    # -- publishing --------------------------------------------------------------------------

    def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Publish every envelope and wait until the server acknowledged each (stored in as
        many replicas as the stream has); ``Unavailable`` when any was not."""
        if not envelopes:
            return
        topics = {envelope.topic for envelope in envelopes}
        self.ensure_streams(topics)
        try:
            self._call(publisher.publish(self.js, self.config, envelopes), self.config.timeout_s)
        except StreamMissing as gone:
            # The server lost a stream this bus knew (an empty store): create it again, with
            # its consumers, and publish the batch again (what was stored before the failure is
            # dropped as a repeat by its Nats-Msg-Id).
            log.warning("jetstream (%s): %s; creating the streams again", self.name,
                        gone.message)
            self.ensure_streams(topics)
            self._call(publisher.publish(self.js, self.config, envelopes),
                       self.config.timeout_s)

    # -- reading -----------------------------------------------------------------------------

    def subscribe(self, consumer: str, topic: str) -> JetStreamContext.PullSubscription:
        """A pull subscription bound to ``consumer``'s durable consumer on ``topic``'s stream
        (both created or checked first)."""
        self.ensure_consumers({consumer: [topic]})
        return self._call(self.js.pull_subscribe_bind(
            durable=consumer, stream=self.config.stream(topic)), self.config.timeout_s)

    def unsubscribe(self, subscription: JetStreamContext.PullSubscription) -> None:
        """Drop a pull subscription whose durable consumer is gone; failures do not matter."""
        with suppress(Unavailable):
            self._call(subscription.unsubscribe(), self.config.timeout_s)

    def fetch(self, subscription: JetStreamContext.PullSubscription, batch: int,
              wait_s: float) -> list[Msg]:
        """Up to ``batch`` messages, waiting up to ``wait_s`` for the first; [] when none came.
        ``Unavailable`` while the connection is down."""
        if not self.connected:
            raise Unavailable(f"JetStream at {self.config.shown}: not connected (reconnecting)")
        return self._call(reader.fetch(subscription, batch, wait_s), wait_s + 1)

    def ack(self, msg: Msg) -> None:
        self._call(msg.ack(), self.config.timeout_s)

    @contextmanager
    def in_progress(self, msgs: Sequence[Msg]) -> Iterator[dict[int, Msg]]:
        """While the body runs, tell the server every third of AckWait that the messages still
        in the yielded dict (by ``id()``) are being worked on (the body removes each once
        acknowledged)."""
        open_msgs = {id(msg): msg for msg in msgs}
        task = asyncio.run_coroutine_threadsafe(
            reader.keep_in_progress(open_msgs, self.config.ack_wait_s / 3), self._loop)
        try:
            yield open_msgs
        finally:
            task.cancel()

    # -- what /readyz says -------------------------------------------------------------------

    def consumer_states(self, topics_of: Mapping[str, Iterable[str]],
                        now: datetime | None = None) -> dict[str, dict[str, Any]]:
        """Per opsgate consumer: messages not yet delivered (``pending``), delivered and not
        acknowledged (``unacked``), delivered more than once (``redelivered``) and the age of
        the oldest unacknowledged one (``oldest_unacked_s``), summed over its topics."""
        return self._call(
            figures.consumer_states(self.js, self.config, topics_of, now or datetime.now(UTC)),
            self.config.timeout_s * 4)
