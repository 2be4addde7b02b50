"""The pull consumer: one reader per opsgate consumer and topic fetches from its durable consumer,
hands each message to the consumer runner, says "in progress" while it works, acknowledges it once
recorded, and buries a message delivered MaxDeliver times without handling it again.

A pull request to a durable consumer the server no longer has is answered by nothing: the fetch
just waits out its time. So a reader that got nothing asks the server whether its durable consumer
is still there, at once after the connection came back (the server may have restarted on an empty
store) and every ``CHECK_EVERY_S`` otherwise (a stream removed by hand); when it is gone, the
reader creates the stream and the consumer again, with the same settings, and reads from the
stream's first message. Messages the server lost with its store are sent again by the relay's
delivery watchdog (``core.messaging.delivery``); the inbox makes every copy harmless."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors

from core.errors import Unavailable
from core.messaging.heartbeat import Polls
from core.messaging.jetstream.config import JetStreamSetupError, first_line
from core.messaging.jetstream.wire import decode
from core.messaging.outage import Outage

if TYPE_CHECKING:
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext

    from core.messaging.consumer import ConsumerRunner
    from core.messaging.jetstream.bus import JetStreamBus

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
"""How often an idle reader asks whether its durable consumer is still on the server."""


async def fetch(subscription: JetStreamContext.PullSubscription, batch: int,
                wait_s: float) -> list[Msg]:
    """Up to ``batch`` messages, waiting up to ``wait_s`` for the first; [] when none came.

    nats-py says "none came" two ways: its own ``TimeoutError`` and, when the deadline ran out
    between its two pull requests (a loaded machine), a bare ``asyncio.TimeoutError``; both are
    an empty fetch, not a lost connection."""
    try:
        return await subscription.fetch(batch, timeout=wait_s)
    except TimeoutError:  # nats.errors.TimeoutError is one too
        return []


async def keep_in_progress(open_msgs: dict[int, Msg], every_s: float) -> None:
    """Every ``every_s``, tell the server each message still in ``open_msgs`` is being worked
    on; runs until cancelled."""
    while True:
        await asyncio.sleep(every_s)
        for msg in list(open_msgs.values()):
            try:
                await msg.in_progress()
            except nats.errors.Error as exc:
                log.debug("jetstream: in-progress ack failed: %s", first_line(exc))


class JetStreamReader:
    """Feeds one opsgate consumer from its durable consumer on one topic's stream."""

    def __init__(self, bus: JetStreamBus, runner: ConsumerRunner, topic: str, *,
                 batch: int = 10, wait_s: float = 1.0, polls: Polls | None = None,
                 check_every_s: float = CHECK_EVERY_S) -> None:
        self.bus = bus
        self.polls = polls  # each pass of ``run`` stamps it: the process's heartbeat
        self.runner = runner
        self.consumer = runner.consumer.name
        self.topic = topic
        self.batch = batch
        self.wait_s = wait_s
        self.check_every_s = check_every_s
        self._checked = (time.monotonic(), bus.reconnects)

    def run(self, stop: threading.Event) -> None:
        """Read until ``stop`` is set. A lost server or database is retried with backoff; the
        messages in hand are left unacknowledged, so the server delivers them again."""
        outage = Outage(f"consumer {self.consumer} on {self.bus.config.stream(self.topic)}")
        subscription: JetStreamContext.PullSubscription | None = None
        while not stop.is_set():
            if self.polls is not None:
                self.polls.stamp(f"{self.consumer}/{self.topic}")
            try:
                if subscription is None:
                    subscription = self.bus.subscribe(self.consumer, self.topic)
                msgs = self.bus.fetch(subscription, self.batch, self.wait_s)
                self.handle(msgs)
                if not msgs and self._consumer_lost():
                    self.bus.unsubscribe(subscription)
                    subscription = None  # created again (stream too) and bound on the next pass
                outage.recovered()
            except JetStreamSetupError as exc:
                stop.wait(outage.failed(exc))
            except Unavailable as exc:
                if isinstance(exc.__cause__, nats.js.errors.NotFoundError):
                    subscription = None  # the durable consumer is gone: bind it anew
                stop.wait(outage.failed(exc))
            except outage.transient as exc:
                stop.wait(outage.failed(exc))

    def _consumer_lost(self) -> bool:
        """Whether the durable consumer is gone from the server, asked after a reconnection and
        every ``check_every_s``; says so in the log when it is."""
        checked_at, reconnects = self._checked
        if (self.bus.reconnects == reconnects
                and time.monotonic() - checked_at < self.check_every_s):
            return False
        self._checked = (time.monotonic(), self.bus.reconnects)
        if self.bus.has_consumer(self.consumer, self.topic):
            return False
        log.warning("%s: durable consumer gone from stream %s (the server lost its store, or "
                    "the stream was removed); creating it again with the same settings",
                    self.consumer, self.bus.config.stream(self.topic))
        return True

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


def readers(bus: JetStreamBus, runner: ConsumerRunner,
            polls: Polls | None = None) -> list[JetStreamReader]:
    """One reader per topic of the runner's consumer."""
    return [JetStreamReader(bus, runner, topic, polls=polls) for topic in runner.consumer.topics]
