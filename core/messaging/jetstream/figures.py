"""What ``/readyz`` says about each opsgate consumer on JetStream: messages waiting, delivered
and not acknowledged, delivered again, and the age of the oldest one not acknowledged."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import nats.js.errors

from core.messaging.jetstream.config import JetStreamConfig

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext


async def consumer_states(js: JetStreamContext, config: JetStreamConfig,
                          topics_of: Mapping[str, Iterable[str]],
                          now: datetime) -> dict[str, dict[str, Any]]:
    """Per opsgate consumer, summed over its topics; a stream without its durable consumer is
    listed under ``missing``."""
    states: dict[str, dict[str, Any]] = {}
    for consumer, topics in sorted(topics_of.items()):
        state: dict[str, Any] = {"pending": 0, "unacked": 0, "redelivered": 0,
                                 "oldest_unacked_s": 0.0}
        for topic in topics:
            stream = config.stream(topic)
            try:
                info = await js.consumer_info(stream, consumer)
            except nats.js.errors.NotFoundError:
                state.setdefault("missing", []).append(stream)
                continue
            state["pending"] += info.num_pending or 0
            state["unacked"] += info.num_ack_pending or 0
            state["redelivered"] += info.num_redelivered or 0
            if info.num_ack_pending and info.ack_floor is not None:
                oldest = await _published_at(js, stream, info.ack_floor.stream_seq + 1)
                if oldest is not None:
                    age = max(0.0, (now - oldest).total_seconds())
                    state["oldest_unacked_s"] = round(max(state["oldest_unacked_s"], age), 3)
        states[consumer] = state
    return states


async def _published_at(js: JetStreamContext, stream: str, seq: int) -> datetime | None:
    try:
        raw = await js.get_msg(stream, seq=seq)
    except nats.js.errors.NotFoundError:
        return None
    return raw.time
