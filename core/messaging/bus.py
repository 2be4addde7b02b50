"""The event bus behind the outbox: Redis Streams consumer groups in production, in-process on the
embedded default. Both deliver at least once; consumers dedup on ``message_id``.

Redis layout: one stream per topic, ``{prefix}{topic}``; one consumer group per consumer (planner,
executor, …); the entry's fields are ``Envelope.to_fields()``.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import redis

from core.messaging.envelope import Envelope

Handler = Callable[[Envelope], None]


class Bus(Protocol):
    def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Hand the envelopes over; returns once the bus holds them durably (or, in-process,
        once every subscriber has taken them)."""


class InProcessBus:
    """Calls every subscriber of a topic synchronously, in publish order.

    The relay marks a row published only after ``publish`` returns, so a crash before that means
    redelivery, never loss. Subscribers must not raise: a consumer runner turns its own failures
    into retries and dead letters.
    """

    def __init__(self) -> None:
        self._subscribers: dict[str, list[Handler]] = defaultdict(list)
        self._lock = threading.Lock()

    def subscribe(self, topics: Iterable[str], handler: Handler) -> None:
        with self._lock:
            for topic in topics:
                self._subscribers[topic].append(handler)

    def publish(self, envelopes: Sequence[Envelope]) -> None:
        for envelope in envelopes:
            with self._lock:
                handlers = list(self._subscribers.get(envelope.topic, ()))
            for handler in handlers:
                handler(envelope)


class RedisStreamsBus:
    """Publishes to one Redis stream per topic; consumers read through consumer groups."""

    def __init__(self, client: redis.Redis, prefix: str = "opsgate:stream:",
                 max_len: int = 1_000_000) -> None:
        self.client = client
        self.prefix = prefix
        self.max_len = max_len

    def stream(self, topic: str) -> str:
        return f"{self.prefix}{topic}"

    def publish(self, envelopes: Sequence[Envelope]) -> None:
        if not envelopes:
            return
        pipe = self.client.pipeline(transaction=False)
        for envelope in envelopes:
            fields: dict[Any, Any] = dict(envelope.to_fields())
            pipe.xadd(self.stream(envelope.topic), fields, maxlen=self.max_len, approximate=True)
        pipe.execute()

    def ensure_group(self, topic: str, group: str) -> None:
        """Create the consumer group (from the stream's start) unless it exists."""
        try:
            self.client.xgroup_create(self.stream(topic), group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
