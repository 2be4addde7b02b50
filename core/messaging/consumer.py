"""Runs a consumer on delivered messages: skips what its inbox has seen, retries failures a
bounded number of times with backoff, then buries the message as a dead letter so the other
cases go on. A failure while the database is unreachable is no attempt: the message is left for
redelivery (``Unavailable``), never buried for an outage. A consumer that cannot take effect yet
(``Held``: Slack is not configured) has its message held (a dead letter marked held, never
retried blind) until ``release_held`` hands it out again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from core.errors import OpsgateError, Unavailable
from core.messaging import inbox, outbox
from core.messaging.envelope import Envelope
from core.metrics import DEAD_LETTERS, INBOX_DEDUP
from core.tracing import bound

log = logging.getLogger(__name__)


class Held(OpsgateError):
    """A consumer cannot take effect for a message yet, and retrying at once cannot help (no
    Slack to post in): the runner holds the message (nothing recorded as done, no retries)
    until ``release_held`` hands it out again."""

    code = "held"


@dataclass(frozen=True)
class Delivery:
    """One message as one consumer handles it."""

    consumer: str
    envelope: Envelope

    @property
    def idempotency_key(self) -> str:
        """The key of the consumer's effect for this message: a redelivery replays it."""
        return f"{self.consumer}:{self.envelope.message_id}"

    @property
    def inbox_entry(self) -> tuple[str, int]:
        return (self.consumer, self.envelope.message_id)


class Consumer(Protocol):
    name: str
    topics: tuple[str, ...]

    def handle(self, delivery: Delivery) -> None:
        """Take effect for the delivery; must be safe to call again for the same message."""


class ConsumerRunner:
    """Runs one consumer on delivered envelopes: inbox dedup, bounded retries, dead letters."""

    def __init__(self, engine: Engine, consumer: Consumer, *, max_attempts: int = 4,
                 backoff_s: float = 0.05, sleep: Callable[[float], None] = time.sleep) -> None:
        self.engine = engine
        self.consumer = consumer
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.sleep = sleep

    def __call__(self, envelope: Envelope) -> None:
        self.deliver(envelope)

    def deliver(self, envelope: Envelope) -> str:
        """Handle ``envelope``; returns "done", "duplicate", "held" or "dead". The message's
        correlation id is bound meanwhile, so the consumer's writes and gateway calls carry it
        on."""
        correlation_id = envelope.payload.get("correlation_id")
        with bound(str(correlation_id) if correlation_id else None):
            return self._deliver(envelope)

    def _deliver(self, envelope: Envelope) -> str:
        name = self.consumer.name
        with self.engine.connect() as conn:
            if inbox.seen(conn, name, envelope.message_id):
                INBOX_DEDUP.labels(consumer=name).inc()
                return "duplicate"
        error = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                self.consumer.handle(Delivery(name, envelope))
            except Held as held:
                return self._hold(envelope, held)
            except Exception as exc:  # a consumer's failure must not stop the others
                if self._database_lost():
                    # Not the message's fault: no attempt spent, nothing buried; the bus
                    # delivers it again once the database answers.
                    raise Unavailable(f"{name} left message {envelope.message_id} for "
                                      f"redelivery: the database is unreachable") from exc
                error = f"{type(exc).__name__}: {exc}"
                log.warning("%s failed on message %s (attempt %d/%d): %s", name,
                            envelope.message_id, attempt, self.max_attempts, error)
                if attempt < self.max_attempts:
                    self.sleep(self.backoff_s * 2 ** (attempt - 1))
                continue
            with self.engine.begin() as conn:
                inbox.mark(conn, name, envelope.message_id)
            log.debug("%s handled message %s (%s)", name, envelope.message_id, envelope.topic)
            return "done"
        with self.engine.begin() as conn:
            inbox.bury(conn, name, envelope, error, self.max_attempts)
        DEAD_LETTERS.labels(consumer=name, topic=envelope.topic).inc()
        return "dead"

    def give_up(self, envelope: Envelope, error: str, attempts: int) -> str:
        """Bury ``envelope`` as a dead letter without handling it (the bus delivered it too
        often: handling it kills or freezes the consumer); "duplicate" when the inbox already
        recorded it."""
        name = self.consumer.name
        with self.engine.begin() as conn:
            if inbox.seen(conn, name, envelope.message_id):
                return "duplicate"
            inbox.bury(conn, name, envelope, error, attempts)
        DEAD_LETTERS.labels(consumer=name, topic=envelope.topic).inc()
        log.error("%s gave up on message %s: %s", name, envelope.message_id, error)
        return "dead"

    def _database_lost(self) -> bool:
        """Whether the database is away (asked only after a failure)."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except SQLAlchemyError:
            return True
        return False

    def _hold(self, envelope: Envelope, held: Held) -> str:
        """Keep ``envelope`` for later: a dead letter marked held (listed by ``opsgate outbox
        dead``, never lost), which ``release_held`` hands out again once the consumer can take
        effect. Not retried meanwhile: retrying at once cannot help."""
        name = self.consumer.name
        with self.engine.begin() as conn:
            inbox.bury(conn, name, envelope, f"{HELD}{held.message}", 1)
        log.info("%s holds message %s: %s", name, envelope.message_id, held.message)
        return "held"


HELD = "held: "
"""How a held message's dead letter starts its error: ``release_held`` looks for it."""


def release_held(engine: Engine, consumer: str) -> int:
    """Hand every message held for ``consumer`` out again (its inbox entry forgotten, its outbox
    row unpublished, so the relay publishes it); how many."""
    with engine.begin() as conn:
        held = inbox.held(conn, consumer, HELD)
        for dead_letter_id in held:
            envelope = inbox.requeue(conn, dead_letter_id, datetime.now(UTC))
            if envelope is not None and not outbox.mark_unpublished(conn, envelope.message_id):
                log.warning("held message %s is no longer in the outbox: requeue it with "
                            "`opsgate outbox dead --requeue %s`", envelope.message_id,
                            dead_letter_id)
    if held:
        log.info("%s: %d held message(s) handed out again", consumer, len(held))
    return len(held)
