"""How the JetStream bus is configured: its servers, the names of its streams and subjects, the
stream and durable-consumer settings it asks for, and the error when the server cannot carry
them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nats.js import api

from core.errors import OpsgateError, Unavailable
from core.redact import url_without_credentials

if TYPE_CHECKING:
    from core.settings import Settings

MAX_BACKOFF_S = 3600.0
"""The longest wait before a message is delivered again."""


class StreamMissing(Unavailable):
    """The server has no stream for a subject the relay publishes on: its store was lost (a
    restart on an empty volume) or the stream was removed. Cured by creating it again."""


class JetStreamSetupError(OpsgateError):
    """The server cannot carry the loop as configured (no JetStream, a stream or consumer whose
    settings disagree with opsgate's): one line saying what and how to fix it. Not retried."""

    code = "jetstream_setup"


def first_line(exc: BaseException) -> str:
    """An exception as one short log line: its type and the first line of its text."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


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
