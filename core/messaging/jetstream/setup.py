"""Creating and checking what the bus needs on the server: each topic's stream (created, or
checked against the settings, naming every difference) and each opsgate consumer's durable pull
consumer on it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import nats.js.errors
from nats.js import api

from core.messaging.jetstream.config import JetStreamConfig, JetStreamSetupError, first_line

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

log = logging.getLogger(__name__)


async def ensure_stream(js: JetStreamContext, config: JetStreamConfig, topic: str) -> bool:
    """Create ``topic``'s stream, or check the one there has the settings it needs; True when
    it was created."""
    want = config.stream_config(topic)
    name = config.stream(topic)
    try:
        info = await js.stream_info(name)
    except nats.js.errors.NotFoundError:
        await js.add_stream(want)
        log.info("jetstream: created stream %s (subject %s, file storage, %d replica(s), "
                 "retention %s)", name, want.subjects[0] if want.subjects else "",
                 config.replicas, config.retention)
        return True
    wrong = _differences(info.config, config, topic)
    if wrong:
        raise JetStreamSetupError(
            f"JetStream stream {name} has {'; '.join(wrong)}: change the stream (`nats "
            f"stream edit {name}`, or remove it while it is empty) or the settings")
    return False


def _differences(have: api.StreamConfig, config: JetStreamConfig, topic: str) -> list[str]:
    """Each way the stream on the server differs from what opsgate needs, in words."""
    wrong = []
    if have.storage != api.StorageType.FILE:
        wrong.append(f"storage {_value(have.storage)} (opsgate needs file)")
    if (have.num_replicas or 1) != config.replicas:
        wrong.append(f"{have.num_replicas or 1} replica(s) (OPSGATE_JETSTREAM_REPLICAS is "
                     f"{config.replicas})")
    if _value(have.retention) != config.retention:
        wrong.append(f"retention {_value(have.retention)} (OPSGATE_JETSTREAM_RETENTION is "
                     f"{config.retention})")
    if not _same_s(have.max_age, config.max_age_s):
        wrong.append(f"max age {_shown_s(have.max_age)} (OPSGATE_JETSTREAM_MAX_AGE_S is "
                     f"{config.max_age_s:g})")
    if not _same_s(have.duplicate_window, config.duplicate_window_s):
        wrong.append(f"duplicate window {_shown_s(have.duplicate_window)} "
                     f"(OPSGATE_JETSTREAM_DUPLICATE_WINDOW_S is "
                     f"{config.duplicate_window_s:g})")
    if list(have.subjects or []) != [config.subject(topic)]:
        wrong.append(f"subjects {', '.join(have.subjects or [])} (opsgate publishes on "
                     f"{config.subject(topic)} alone)")
    return wrong


async def ensure_consumer(js: JetStreamContext, config: JetStreamConfig, consumer: str,
                          topic: str) -> None:
    """Create (or update to the settings) ``consumer``'s durable consumer on ``topic``'s
    stream."""
    stream = config.stream(topic)
    try:
        await js.add_consumer(stream, config.consumer_config(consumer, topic))
    except nats.js.errors.BadRequestError as exc:
        raise JetStreamSetupError(
            f"JetStream consumer {consumer} on stream {stream} cannot take opsgate's "
            f"settings ({exc.description or first_line(exc)}): remove it (`nats consumer "
            f"rm {stream} {consumer}`) and start again; it is created anew from the "
            "stream's first message, which the inboxes make harmless") from exc


async def has_consumer(js: JetStreamContext, config: JetStreamConfig, consumer: str,
                       topic: str) -> bool:
    """Whether ``consumer``'s durable consumer (and so ``topic``'s stream) is on the server."""
    try:
        await js.consumer_info(config.stream(topic), consumer)
    except nats.js.errors.NotFoundError:
        return False
    return True


def _same_s(have: float | None, want: float) -> bool:
    """Durations as the server reports them (nanoseconds, read back as seconds)."""
    return abs((have or 0.0) - want) < 0.001


def _shown_s(have: float | None) -> str:
    return f"{have:g} s" if have else "unlimited"


def _value(enum: Any) -> str:
    return str(getattr(enum, "value", enum))
