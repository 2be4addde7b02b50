"""The settings of the closed loop: the bus, the relay and the consumers (docs/operations.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from core.settings.forms import BusUrl


class LoopSettings(BaseModel):
    """The relay, the bus that carries the loop's messages (JetStream, Redis Streams or in
    process) and its consumers."""

    bus_url: BusUrl | None = Field(
        default=None,
        description="NATS JetStream carries the loop's messages between `opsgate relay` and "
        "`opsgate consume` (nats://host:4222, comma-separated for a cluster). Unset: Redis "
        "Streams when OPSGATE_REDIS_URL is set, else the in-process bus inside `opsgate serve`.",
    )
    jetstream_prefix: str = Field(
        default="opsgate", pattern=r"^[A-Za-z0-9_-]{1,32}$",
        description="Names on JetStream: subject <prefix>.<topic>, stream <prefix>_<topic> "
        "(dots as _), one stream per topic.",
    )
    jetstream_replicas: int = Field(
        default=1, ge=1, le=5,
        description="Copies JetStream keeps of each stream: 1 on one server, 3 in a cluster.",
    )
    jetstream_retention: Literal["limits", "interest"] = Field(
        default="limits",
        description="'limits': messages stay for OPSGATE_JETSTREAM_MAX_AGE_S; 'interest': a "
        "message goes once every opsgate consumer acknowledged it.",
    )
    jetstream_max_age_s: float = Field(
        default=7 * 86400.0, ge=60, le=365 * 86400,
        description="How long a stream keeps a message (both retentions); default a week.",
    )
    jetstream_ack_wait_s: float = Field(
        default=30.0, ge=1, le=3600,
        description="A delivered message not acknowledged this long is delivered again; a "
        "consumer still handling it says so every third of it (in-progress acks).",
    )
    jetstream_max_deliver: int = Field(
        default=5, ge=2, le=100,
        description="Deliveries of one message to one consumer, with waits doubling from "
        "OPSGATE_JETSTREAM_ACK_WAIT_S; the last becomes a dead letter (`opsgate outbox dead`) "
        "instead of being handled again.",
    )
    jetstream_duplicate_window_s: float = Field(
        default=120.0, ge=1, le=86400,
        description="JetStream drops a message published again with the same Nats-Msg-Id "
        "within this window (the relay's own retries).",
    )
    stream_prefix: str = Field(
        default="opsgate:stream:",
        description="Prefix of the Redis stream names (one stream per topic).",
    )
    relay_poll_s: float = Field(
        default=1.0, gt=0, le=60,
        description="The relay's polling floor: a lost NOTIFY costs at most this long.",
    )
    relay_batch_size: int = Field(default=200, ge=1, le=10_000)
    loop_poll_s: float = Field(
        default=0.1, gt=0, le=60,
        description="How often the in-process loop looks for new outbox rows on SQLite, "
        "which has no NOTIFY.",
    )
    stream_claim_idle_s: float = Field(
        default=30.0, gt=0,
        description="A stream entry pending this long with a consumer that died is taken over "
        "(XAUTOCLAIM); must exceed the slowest handling of one message.",
    )
    consumer_max_attempts: int = Field(
        default=4, ge=1, le=20,
        description="Attempts of a consumer on one message before it becomes a dead letter.",
    )
    delivery_bound_s: float = Field(
        default=120.0, gt=0, le=86_400,
        description="A published message that a consumer of its topic has not recorded in its "
        "inbox this long after is sent again by the relay and reported by /readyz and "
        "`opsgate reconcile`; must exceed the slowest handling of one message.",
    )
