"""A consumer's loop on Redis Streams: XREADGROUP new entries, hand each to the consumer runner,
XACK it once handled; XAUTOCLAIM entries left pending by a consumer that died. A group Redis lost
(NOGROUP) is created again at once; messages Redis lost with it are sent again by the relay's
delivery watchdog (``core.messaging.delivery``).

An entry is acknowledged only after the runner finished with it (done, duplicate or buried), so a
crash in between means redelivery, which the inbox makes harmless.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import redis

from core.messaging.bus import RedisStreamsBus
from core.messaging.consumer import ConsumerRunner
from core.messaging.envelope import Envelope
from core.messaging.heartbeat import Polls
from core.messaging.outage import Outage

log = logging.getLogger(__name__)


def _lost_group(exc: redis.ResponseError) -> bool:
    """NOGROUP: the stream or its group is gone (Redis restarted without its data, or a stream
    was deleted); creating the group again is the cure, not waiting."""
    return str(exc).startswith("NOGROUP")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class StreamConsumer:
    """Feeds one consumer group (named after the consumer) from the streams of its topics."""

    def __init__(self, bus: RedisStreamsBus, runner: ConsumerRunner, *, batch: int = 50,
                 block_ms: int = 1000, claim_idle_ms: int = 30_000,
                 name: str | None = None, polls: Polls | None = None) -> None:
        self.bus = bus
        self.polls = polls  # each pass of ``run`` stamps it: the process's heartbeat
        self.runner = runner
        self.group = runner.consumer.name
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.batch = batch
        self.block_ms = block_ms
        self.claim_idle_ms = claim_idle_ms
        self.streams = [bus.stream(topic) for topic in runner.consumer.topics]

    def ensure_groups(self) -> None:
        for topic in self.runner.consumer.topics:
            self.bus.ensure_group(topic, self.group)

    def poll(self, *, own_pending: bool = False) -> int:
        """Handle what XREADGROUP hands this consumer (waits up to ``block_ms``); with
        ``own_pending``, the entries it read before and has not acknowledged (an outage
        interrupted them), at once."""
        entries: Any = self.bus.client.xreadgroup(
            self.group, self.name, dict.fromkeys(self.streams, "0" if own_pending else ">"),
            count=self.batch, block=None if own_pending else self.block_ms)
        handled = 0
        for stream, messages in entries or []:
            for entry_id, fields in messages:
                if fields:  # empty when a pending entry was trimmed from the stream
                    handled += self._handle(_text(stream), entry_id, fields)
        return handled

    def reclaim(self) -> int:
        """Take over entries another consumer of the group left pending past ``claim_idle_ms``."""
        handled = 0
        for stream in self.streams:
            reply: Any = self.bus.client.xautoclaim(stream, self.group, self.name,
                                               min_idle_time=self.claim_idle_ms,
                                               start_id="0-0", count=self.batch)
            for entry_id, fields in reply[1]:
                if fields:  # None when the entry was trimmed from the stream
                    handled += self._handle(stream, entry_id, fields)
        return handled

    def run(self, stop: threading.Event, *, reclaim_every_s: float = 5.0) -> None:
        """Consume until ``stop`` is set. A lost group (Redis lost its data) is created again at
        once; a lost database or Redis is retried with backoff, the entries in hand left pending
        and taken up again first when it answers."""
        outage = Outage(f"consumer {self.group} ({self.name})")
        next_reclaim, missing_group = 0.0, True
        while not stop.is_set():
            if self.polls is not None:
                self.polls.stamp(f"{self.group}/{self.name}")
            try:
                if missing_group:
                    self.ensure_groups()
                    missing_group = False
                if time.monotonic() >= next_reclaim:
                    self.reclaim()
                    next_reclaim = time.monotonic() + reclaim_every_s
                if outage.ongoing:
                    self.poll(own_pending=True)
                outage.recovered()
                self.poll()
            except redis.ResponseError as exc:
                if not _lost_group(exc):
                    stop.wait(outage.failed(exc))
                    continue
                log.warning("%s: consumer group missing on Redis (%s); creating it again",
                            self.group, exc)
                missing_group = True
            except outage.transient as exc:
                stop.wait(outage.failed(exc))

    def _handle(self, stream: str, entry_id: Any, fields: dict[Any, Any]) -> int:
        decoded = {_text(k): _text(v) for k, v in fields.items()}
        try:
            envelope = Envelope.from_fields(decoded)
        except (KeyError, ValueError) as exc:
            log.error("%s: dropping malformed entry %s on %s: %s", self.group, entry_id, stream,
                      exc)
        else:
            self.runner.deliver(envelope)
        self.bus.client.xack(stream, self.group, entry_id)
        return 1
