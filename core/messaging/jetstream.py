"""The event bus on NATS JetStream: a durable, replicated log behind the outbox.

Layout: one stream per topic, ``{prefix}_{topic}`` (dots as ``_``), on subject
``{prefix}.{topic}``, in file storage with the replicas and retention the settings name; on each
stream one durable pull consumer per opsgate consumer of the topic, named after it.

The relay publishes each row with ``Nats-Msg-Id`` ``{row id}.{publication}``: JetStream's
duplicate window drops the relay's own retry of a claim (the same publication), while a resend on
purpose (the delivery watchdog, a requeued dead letter: the next publication) goes through.
``publish`` returns once the server acknowledged every message, so a row is marked published only
then (the relay commits its marks after ``publish``; a failure rolls them back).

A reader acknowledges a message after the consumer runner recorded it in the inbox (done,
duplicate, dead or held). While the runner works, the reader says "in progress" every third of
AckWait, so a long step is not delivered again; a frozen or killed process's message is, after
AckWait, to another reader of the same durable consumer, and the inbox makes that harmless. The
server delivers a message at most MaxDeliver times, waiting longer each time (doubling from
AckWait); the last delivery is buried as a dead letter (``opsgate outbox dead``) without being
handled again, so a message that kills its consumer never blocks the other cases.

nats-py is asyncio and opsgate's workers are threads: the bus runs one event loop on a thread of
its own, and its methods wait there for their coroutines.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from core.errors import OpsgateError, Unavailable
from core.messaging.envelope import Envelope
from core.messaging.outage import Outage
from core.redact import url_without_credentials

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext

    from core.messaging.consumer import ConsumerRunner
    from core.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_BACKOFF_S = 3600.0
"""The longest wait before a message is delivered again."""


class JetStreamSetupError(OpsgateError):
    """The server cannot carry the loop as configured (no JetStream, a stream or consumer whose
    settings disagree with opsgate's): one line saying what and how to fix it. Not retried."""

    code = "jetstream_setup"


@dataclass(frozen=True)
class JetStreamConfig:
    """Where the bus is and how its streams and consumers are set up."""

    servers: tuple[str, ...]
    prefix: str = "opsgate"
    replicas: int = 1
    retention: str = "limits"
    max_age_s: float = 7 * 86400.0
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    duplicate_window_s: float = 120.0
    timeout_s: float = 5.0

    @classmethod
    def of(cls, settings: Settings) -> JetStreamConfig:
        assert settings.bus_url, "JetStream needs OPSGATE_BUS_URL"
        return cls(servers=tuple(settings.bus_url.split(",")),
                   prefix=settings.jetstream_prefix, replicas=settings.jetstream_replicas,
                   retention=settings.jetstream_retention,
                   max_age_s=settings.jetstream_max_age_s,
                   ack_wait_s=settings.jetstream_ack_wait_s,
                   max_deliver=settings.jetstream_max_deliver,
                   duplicate_window_s=settings.jetstream_duplicate_window_s)

    @property
    def shown(self) -> str:
        """The servers as a log line may say them (no credentials)."""
        return ",".join(url_without_credentials(url) for url in self.servers)

    def subject(self, topic: str) -> str:
        return f"{self.prefix}.{topic}"

    def stream(self, topic: str) -> str:
        return f"{self.prefix}_{topic}".replace(".", "_")

    def backoff(self) -> list[float]:
        """The wait after each delivery before the next: AckWait, then doubling."""
        return [min(self.ack_wait_s * 2 ** n, MAX_BACKOFF_S)
                for n in range(self.max_deliver - 1)]

    def stream_config(self, topic: str) -> api.StreamConfig:
        return api.StreamConfig(
            name=self.stream(topic), subjects=[self.subject(topic)],
            retention=api.RetentionPolicy(self.retention), storage=api.StorageType.FILE,
            num_replicas=self.replicas, max_age=self.max_age_s,
            duplicate_window=self.duplicate_window_s, discard=api.DiscardPolicy.OLD)

    def consumer_config(self, consumer: str, topic: str) -> api.ConsumerConfig:
        return api.ConsumerConfig(
            name=consumer, durable_name=consumer, filter_subject=self.subject(topic),
            deliver_policy=api.DeliverPolicy.ALL, ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait_s, max_deliver=self.max_deliver, backoff=self.backoff(),
            max_ack_pending=1000)


def message_id(envelope: Envelope) -> str:
    """The ``Nats-Msg-Id`` of a publication: the outbox row's id and which publication it is."""
    return f"{envelope.message_id}.{envelope.publication}"


def headers(envelope: Envelope) -> dict[str, str] | None:
    """A relay's publication carries its ``Nats-Msg-Id``; a message sent outside the relay
    (publication 0: a dead letter requeued after its outbox row was deleted) carries none, so
    sending it again within the duplicate window is not dropped as a repeat."""
    return {"Nats-Msg-Id": message_id(envelope)} if envelope.publication else None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


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
        self._lock = threading.Lock()

    # -- the connection ----------------------------------------------------------------------

    def connect(self) -> JetStreamBus:
        """Connect (reconnecting for ever after any later loss) and check that the server has
        JetStream; ``Unavailable`` when no server answers, ``JetStreamSetupError`` without
        JetStream."""
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
            log.debug("jetstream (%s): %s", self.name, _first_line(exc))

        async def disconnected() -> None:
            if self._nc is not None and self._nc.is_closed:
                return  # our own close()
            log.warning("jetstream (%s): disconnected from %s; reconnecting", self.name,
                        self.config.shown)

        async def reconnected() -> None:
            log.warning("jetstream (%s): reconnected", self.name)

        try:
            self._nc = await nats.connect(
                servers=list(self.config.servers), name=self.name,
                connect_timeout=int(max(1, self.config.timeout_s)), allow_reconnect=True,
                max_reconnect_attempts=-1, reconnect_time_wait=0.25,
                error_cb=error, disconnected_cb=disconnected, reconnected_cb=reconnected)
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            raise Unavailable(f"NATS at {self.config.shown} is not reachable: "
                              f"{_first_line(exc)}") from exc
        self._js = self._nc.jetstream(timeout=self.config.timeout_s)
        try:
            await self._js.account_info()
        except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError,
                nats.errors.TimeoutError) as exc:
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
            raise Unavailable(f"JetStream at {self.config.shown} has no stream for the subject "
                              f"({_first_line(exc)})") from exc
        except (TimeoutError, nats.errors.Error, OSError, FutureTimeout) as exc:
            future.cancel()
            raise Unavailable(f"JetStream at {self.config.shown}: {_first_line(exc)}") from exc

    @property
    def js(self) -> JetStreamContext:
        assert self._js is not None, "JetStreamBus.connect() first"
        return self._js

    # -- streams and consumers ---------------------------------------------------------------

    def ensure_streams(self, topics: Iterable[str]) -> None:
        """Create each topic's stream, or check the one there has the settings it needs."""
        for topic in topics:
            if self.config.stream(topic) not in self._streams:
                self._call(self._ensure_stream(topic), self.config.timeout_s)
                with self._lock:
                    self._streams.add(self.config.stream(topic))

    async def _ensure_stream(self, topic: str) -> None:
        want = self.config.stream_config(topic)
        name = self.config.stream(topic)
        try:
            info = await self.js.stream_info(name)
        except nats.js.errors.NotFoundError:
            await self.js.add_stream(want)
            log.info("jetstream: created stream %s (subject %s, file storage, %d replica(s), "
                     "retention %s)", name, want.subjects[0] if want.subjects else "",
                     self.config.replicas, self.config.retention)
            return
        have = info.config
        wrong = []
        if have.storage != api.StorageType.FILE:
            wrong.append(f"storage {_value(have.storage)} (opsgate needs file)")
        if (have.num_replicas or 1) != self.config.replicas:
            wrong.append(f"{have.num_replicas or 1} replica(s) (OPSGATE_JETSTREAM_REPLICAS is "
                         f"{self.config.replicas})")
        if _value(have.retention) != self.config.retention:
            wrong.append(f"retention {_value(have.retention)} (OPSGATE_JETSTREAM_RETENTION is "
                         f"{self.config.retention})")
        if not _same_s(have.max_age, self.config.max_age_s):
            wrong.append(f"max age {_shown_s(have.max_age)} (OPSGATE_JETSTREAM_MAX_AGE_S is "
                         f"{self.config.max_age_s:g})")
        if not _same_s(have.duplicate_window, self.config.duplicate_window_s):
            wrong.append(f"duplicate window {_shown_s(have.duplicate_window)} "
                         f"(OPSGATE_JETSTREAM_DUPLICATE_WINDOW_S is "
                         f"{self.config.duplicate_window_s:g})")
        if list(have.subjects or []) != [self.config.subject(topic)]:
            wrong.append(f"subjects {', '.join(have.subjects or [])} (opsgate publishes on "
                         f"{self.config.subject(topic)} alone)")
        if wrong:
            raise JetStreamSetupError(
                f"JetStream stream {name} has {'; '.join(wrong)}: change the stream (`nats "
                f"stream edit {name}`, or remove it while it is empty) or the settings")

    def ensure_consumers(self, topics_of: Mapping[str, Iterable[str]]) -> None:
        """Create (or update to the settings) each opsgate consumer's durable consumer on the
        stream of each of its topics; their streams first."""
        for consumer, topics in topics_of.items():
            for topic in topics:
                self.ensure_streams([topic])
                self._call(self._ensure_consumer(consumer, topic), self.config.timeout_s)

    async def _ensure_consumer(self, consumer: str, topic: str) -> None:
        stream = self.config.stream(topic)
        try:
            await self.js.add_consumer(stream, self.config.consumer_config(consumer, topic))
        except nats.js.errors.BadRequestError as exc:
            raise JetStreamSetupError(
                f"JetStream consumer {consumer} on stream {stream} cannot take opsgate's "
                f"settings ({exc.description or _first_line(exc)}): remove it (`nats consumer "
                f"rm {stream} {consumer}`) and start again; it is created anew from the "
                "stream's first message, which the inboxes make harmless") from exc

    # -- publishing --------------------------------------------------------------------------

    def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Publish every envelope and wait until the server acknowledged each (stored in as
        many replicas as the stream has); ``Unavailable`` when any was not."""
        if not envelopes:
            return
        self.ensure_streams({envelope.topic for envelope in envelopes})
        self._call(self._publish(envelopes), self.config.timeout_s)

    async def _publish(self, envelopes: Sequence[Envelope]) -> None:
        results = await asyncio.gather(*(
            self.js.publish(self.config.subject(envelope.topic), encode(envelope),
                            headers=headers(envelope))
            for envelope in envelopes), return_exceptions=True)
        failed = [result for result in results if isinstance(result, BaseException)]
        if failed:
            raise failed[0]

    # -- reading -----------------------------------------------------------------------------

    def subscribe(self, consumer: str, topic: str) -> JetStreamContext.PullSubscription:
        """A pull subscription bound to ``consumer``'s durable consumer on ``topic``'s stream
        (both created or checked first)."""
        self.ensure_consumers({consumer: [topic]})
        return self._call(self.js.pull_subscribe_bind(
            durable=consumer, stream=self.config.stream(topic)), self.config.timeout_s)

    def fetch(self, subscription: JetStreamContext.PullSubscription, batch: int,
              wait_s: float) -> list[Msg]:
        """Up to ``batch`` messages, waiting up to ``wait_s`` for the first; [] when none came.
        ``Unavailable`` while the connection is down."""
        if not self.connected:
            raise Unavailable(f"JetStream at {self.config.shown}: not connected (reconnecting)")
        return self._call(self._fetch(subscription, batch, wait_s), wait_s + 1)

    @staticmethod
    async def _fetch(subscription: JetStreamContext.PullSubscription, batch: int,
                     wait_s: float) -> list[Msg]:
        try:
            return await subscription.fetch(batch, timeout=wait_s)
        except nats.errors.TimeoutError:
            return []

    def ack(self, msg: Msg) -> None:
        self._call(msg.ack(), self.config.timeout_s)

    @contextmanager
    def in_progress(self, msgs: Sequence[Msg]) -> Iterator[dict[int, Msg]]:
        """While the body runs, tell the server every third of AckWait that the messages still
        in the yielded dict (by ``id()``) are being worked on (the body removes each once
        acknowledged)."""
        open_msgs = {id(msg): msg for msg in msgs}
        every_s = self.config.ack_wait_s / 3

        async def beat() -> None:
            while True:
                await asyncio.sleep(every_s)
                for msg in list(open_msgs.values()):
                    try:
                        await msg.in_progress()
                    except nats.errors.Error as exc:
                        log.debug("jetstream: in-progress ack failed: %s", _first_line(exc))

        task = asyncio.run_coroutine_threadsafe(beat(), self._loop)
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
        return self._call(self._consumer_states(topics_of, now or datetime.now(UTC)),
                          self.config.timeout_s * 4)

    async def _consumer_states(self, topics_of: Mapping[str, Iterable[str]],
                               now: datetime) -> dict[str, dict[str, Any]]:
        states: dict[str, dict[str, Any]] = {}
        for consumer, topics in sorted(topics_of.items()):
            state: dict[str, Any] = {"pending": 0, "unacked": 0, "redelivered": 0,
                                     "oldest_unacked_s": 0.0}
            for topic in topics:
                stream = self.config.stream(topic)
                try:
                    info = await self.js.consumer_info(stream, consumer)
                except nats.js.errors.NotFoundError:
                    state.setdefault("missing", []).append(stream)
                    continue
                state["pending"] += info.num_pending or 0
                state["unacked"] += info.num_ack_pending or 0
                state["redelivered"] += info.num_redelivered or 0
                if info.num_ack_pending and info.ack_floor is not None:
                    oldest = await self._published_at(stream, info.ack_floor.stream_seq + 1)
                    if oldest is not None:
                        age = max(0.0, (now - oldest).total_seconds())
                        state["oldest_unacked_s"] = round(max(state["oldest_unacked_s"], age),
                                                          3)
            states[consumer] = state
        return states

    async def _published_at(self, stream: str, seq: int) -> datetime | None:
        try:
            raw = await self.js.get_msg(stream, seq=seq)
        except nats.js.errors.NotFoundError:
            return None
        return raw.time


def _same_s(have: float | None, want: float) -> bool:
    """Durations as the server reports them (nanoseconds, read back as seconds)."""
    return abs((have or 0.0) - want) < 0.001


def _shown_s(have: float | None) -> str:
    return f"{have:g} s" if have else "unlimited"


def _value(enum: Any) -> str:
    return str(getattr(enum, "value", enum))


def encode(envelope: Envelope) -> bytes:
    return json.dumps({"message_id": envelope.message_id, "topic": envelope.topic,
                       "key": envelope.key, "payload": envelope.payload},
                      separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> Envelope:
    fields = json.loads(data)
    return Envelope(int(fields["message_id"]), str(fields["topic"]), str(fields["key"]),
                    dict(fields["payload"]))


# -- a consumer's reader ----------------------------------------------------------------------


class JetStreamReader:
    """Feeds one opsgate consumer from its durable consumer on one topic's stream."""

    def __init__(self, bus: JetStreamBus, runner: ConsumerRunner, topic: str, *,
                 batch: int = 10, wait_s: float = 1.0) -> None:
        self.bus = bus
        self.runner = runner
        self.consumer = runner.consumer.name
        self.topic = topic
        self.batch = batch
        self.wait_s = wait_s

    def run(self, stop: threading.Event) -> None:
        """Read until ``stop`` is set. A lost server or database is retried with backoff; the
        messages in hand are left unacknowledged, so the server delivers them again."""
        outage = Outage(f"consumer {self.consumer} on {self.bus.config.stream(self.topic)}")
        subscription: JetStreamContext.PullSubscription | None = None
        while not stop.is_set():
            try:
                if subscription is None:
                    subscription = self.bus.subscribe(self.consumer, self.topic)
                msgs = self.bus.fetch(subscription, self.batch, self.wait_s)
                self.handle(msgs)
                outage.recovered()
            except JetStreamSetupError as exc:
                stop.wait(outage.failed(exc))
            except Unavailable as exc:
                if isinstance(exc.__cause__, nats.js.errors.NotFoundError):
                    subscription = None  # the durable consumer is gone: bind it anew
                stop.wait(outage.failed(exc))
            except outage.transient as exc:
                stop.wait(outage.failed(exc))

    def handle(self, msgs: Sequence[Msg]) -> int:
        """Hand each message to the runner and acknowledge it once recorded; how many."""
        if not msgs:
            return 0
        with self.bus.in_progress(msgs) as open_msgs:
            for msg in msgs:
                self._handle(msg)
                self.bus.ack(msg)
                open_msgs.pop(id(msg), None)
        return len(msgs)

    def _handle(self, msg: Msg) -> None:
        try:
            envelope = decode(msg.data)
        except (KeyError, ValueError, TypeError) as exc:
            log.error("%s: dropping malformed message on %s: %s", self.consumer, msg.subject,
                      exc)
            return
        delivered = msg.metadata.num_delivered
        if delivered > 1:
            log.warning("%s: message %s delivered again (delivery %d): the reader that had it "
                        "did not acknowledge it within AckWait (stopped, frozen or cut off)",
                        self.consumer, envelope.message_id, delivered)
        if delivered >= self.bus.config.max_deliver:
            self.runner.give_up(envelope, (
                f"delivered {delivered} times by JetStream without being acknowledged: the "
                "consumer died or froze while handling it each time"), delivered)
            return
        self.runner.deliver(envelope)


def readers(bus: JetStreamBus, runner: ConsumerRunner) -> list[JetStreamReader]:
    """One reader per topic of the runner's consumer."""
    return [JetStreamReader(bus, runner, topic) for topic in runner.consumer.topics]

