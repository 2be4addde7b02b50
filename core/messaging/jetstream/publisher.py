"""The relay's side of the bus: publish a batch of outbox rows on their subjects and return only
once the server acknowledged every one (stored in as many replicas as the stream has)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.messaging.envelope import Envelope
from core.messaging.jetstream.config import JetStreamConfig
from core.messaging.jetstream.wire import encode, headers

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext


async def publish(js: JetStreamContext, config: JetStreamConfig,
                  envelopes: Sequence[Envelope]) -> None:
    """Publish every envelope at once; the first failure is raised after all have answered."""
    results = await asyncio.gather(*(
        js.publish(config.subject(envelope.topic), encode(envelope), headers=headers(envelope))
        for envelope in envelopes), return_exceptions=True)
    failed = [result for result in results if isinstance(result, BaseException)]
    if failed:
        raise failed[0]
