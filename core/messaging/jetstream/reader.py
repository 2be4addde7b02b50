"""The pull consumer: one reader per opsgate consumer and topic fetches from its durable consumer,
hands each message to the consumer runner, says "in progress" while it works, acknowledges it once
recorded, and buries a message delivered MaxDeliver times without handling it again."""

from __future__ import annotations

import asyncio
import logging
import threading
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


async def fetch(subscription: JetStreamContext.PullSubscription, batch: int,
                wait_s: float) -> list[Msg]:
    """Up to ``batch`` messages, waiting up to ``wait_s`` for the first; [] when none came."""
    try:
        return await subscription.fetch(batch, timeout=wait_s)
    except nats.errors.TimeoutError:
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
                 batch: int = 10, wait_s: float = 1.0, polls: Polls | None = None) -> None:
        self.bus = bus
        self.polls = polls  # each pass of ``run`` stamps it: the process's heartbeat
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
            if self.polls is not None:
                self.polls.stamp(f"{self.consumer}/{self.topic}")
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


def readers(bus: JetStreamBus, runner: ConsumerRunner,
            polls: Polls | None = None) -> list[JetStreamReader]:
    """One reader per topic of the runner's consumer."""
    return [JetStreamReader(bus, runner, topic, polls=polls) for topic in runner.consumer.topics]
