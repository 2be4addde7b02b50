"""Delivery proven end to end: a published outbox row counts as delivered once every consumer of
its topic has recorded it in its inbox (handled, or buried as a dead letter), never because the
bus accepted it. The watchdog marks such rows ``delivered_at`` and hands a row back to the relay
(unpublished again) when a consumer has not recorded it within the bound, so a bus that lost its
messages (Redis restarted without persistence: streams, groups, pending entries gone) costs
latency, never a case. Sending again is harmless: a consumer that recorded the message skips it.

Two clocks, each for its own question. Whether a message is delivered is judged from the
database alone, and how long it has waited counts from when it was due (written, or its
``deliver_after``): ``/readyz`` and ``opsgate reconcile`` report it from one bound after that
until every consumer recorded it, however often it was sent again meanwhile. When to send it
again counts from its last publication (the watchdog's own schedule): a row sent again waits a new
bound, and longer each time.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Engine, func, select, union_all, update

from core.clock import Clock, utcnow
from core.db.case_store import as_utc
from core.db.tables import inbox, outbox
from core.messaging.outage import Outage
from core.metrics import DELIVERY_RESENT

log = logging.getLogger(__name__)

Subscribers = Mapping[str, frozenset[str]]
"""Topic -> the consumers whose inbox rows prove one of its messages delivered."""

SCAN_LIMIT = 1000
"""Undelivered rows one look reads at most (oldest first)."""


def subscribers(topics_of: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    """The subscribers of each topic, from each consumer's topics (``{consumer: topics}``)."""
    by_topic: dict[str, set[str]] = defaultdict(set)
    for consumer, topics in topics_of.items():
        for topic in topics:
            by_topic[topic].add(consumer)
    return {topic: frozenset(names) for topic, names in by_topic.items()}


@dataclass(frozen=True)
class Late:
    """A message published at least once that some consumers of its topic have not recorded
    past the bound since it was due."""

    message_id: int
    topic: str
    key: str
    due_at: datetime
    """When it could first be published (written, or its ``deliver_after``)."""
    published_at: datetime | None
    """Its last publication; None while it waits for the relay to send it again."""
    missing: tuple[str, ...]
    attempts: int = 1

    def waited_s(self, now: datetime) -> float:
        """How long it has waited for its consumers: from when it was due, never reset."""
        return max(0.0, (now - self.due_at).total_seconds())

    def age_s(self, now: datetime) -> float:
        """How long since its last publication (0 while it waits for the relay)."""
        if self.published_at is None:
            return 0.0
        return max(0.0, (now - self.published_at).total_seconds())

    @property
    def sent_again(self) -> int:
        """How often the watchdog sent it again (each time counts one publication and one
        hand-back in ``attempts``)."""
        return max(0, (self.attempts - 1) // 2)


@dataclass
class Delivery:
    """What one look at the published, undelivered rows found."""

    delivered: list[int] = field(default_factory=list)
    late: list[Late] = field(default_factory=list)


def look(engine: Engine, topics: Subscribers, now: datetime, bound_s: float,
         limit: int = SCAN_LIMIT) -> Delivery:
    """Rows published at least once and not yet marked delivered: those every subscriber
    recorded, and those some subscriber has not recorded ``bound_s`` after they were due (sent
    again or not)."""
    fields = (outbox.c.id, outbox.c.topic, outbox.c.key, outbox.c.published_at,
              outbox.c.attempts,
              func.coalesce(outbox.c.deliver_after, outbox.c.created_at).label("due_at"))
    # Two selects, each on its own partial index: published and not delivered; handed back to
    # the relay (unpublished again after a publication).
    either = union_all(
        select(*fields).where(outbox.c.published_at.is_not(None),
                              outbox.c.delivered_at.is_(None)),
        select(*fields).where(outbox.c.published_at.is_(None), outbox.c.attempts > 0,
                              outbox.c.delivered_at.is_(None))).subquery()
    rows = select(either).order_by(either.c.id).limit(limit)
    with engine.connect() as conn:
        published = list(conn.execute(rows))
        recorded: dict[int, set[str]] = defaultdict(set)
        if published:
            receipts = select(inbox.c.message_id, inbox.c.consumer).where(
                inbox.c.message_id.in_([row.id for row in published]))
            for message_id, consumer in conn.execute(receipts):
                recorded[int(message_id)].add(str(consumer))
    cutoff = now - timedelta(seconds=bound_s)
    found = Delivery()
    for row in published:
        missing = topics.get(row.topic, frozenset()) - recorded[row.id]
        if not missing:
            found.delivered.append(row.id)
        elif as_utc(row.due_at) < cutoff:
            published_at = None if row.published_at is None else as_utc(row.published_at)
            found.late.append(Late(row.id, row.topic, row.key, as_utc(row.due_at),
                                   published_at, tuple(sorted(missing)), row.attempts))
    return found


def mark_delivered(engine: Engine, ids: list[int], now: datetime) -> None:
    if ids:
        with engine.begin() as conn:
            conn.execute(update(outbox).where(outbox.c.id.in_(ids)).values(delivered_at=now))


def send_again(engine: Engine, late: Iterable[Late]) -> list[Late]:
    """Hand each late row back to the relay (unpublished again); returns those this call did.
    Compare-and-set on the publication seen: of several watchdogs one wins, and a row the relay
    published again meanwhile waits a new bound."""
    again = []
    with engine.begin() as conn:
        for message in late:
            if message.published_at is None:
                continue  # handed back already: it waits for the relay
            reset = conn.execute(
                update(outbox)
                .where(outbox.c.id == message.message_id, outbox.c.delivered_at.is_(None),
                       outbox.c.published_at == message.published_at)
                # attempts + 1: a relay still publishing the row must not mark it over this.
                .values(published_at=None, attempts=outbox.c.attempts + 1))
            if reset.rowcount:
                again.append(message)
    return again


class DeliveryWatchdog:
    """Marks delivered rows and sends late ones again, every ``every_s`` until stopped."""

    def __init__(self, engine: Engine, topics: Subscribers, *, bound_s: float,
                 clock: Clock = utcnow) -> None:
        self.engine = engine
        self.topics = topics
        self.bound_s = bound_s
        self.clock = clock

    @property
    def every_s(self) -> float:
        """How often to look: a few times per bound, at least every 10 s, at most twice a second."""
        return min(max(self.bound_s / 4, 0.5), 10.0)

    def due(self, message: Late, now: datetime) -> bool:
        """Whether to send ``message`` again now: a bound after its publication, then twice
        as long after each time it was sent again (up to 16 bounds), so a consumer that is
        slow rather than lost is not buried in copies. Never while it waits for the relay."""
        return message.published_at is not None and (
            message.age_s(now) >= self.bound_s * 2.0 ** min(message.sent_again, 4))

    def sweep(self) -> list[Late]:
        """One look: marks what was delivered, sends the late again; returns what it sent."""
        now = self.clock()
        found = look(self.engine, self.topics, now, self.bound_s)
        mark_delivered(self.engine, found.delivered, now)
        again = send_again(self.engine, [m for m in found.late if self.due(m, now)])
        for message in again:
            DELIVERY_RESENT.labels(topic=message.topic).inc()
            log.warning("delivery: message #%d (%s, case %s) not recorded by %s %.0fs after it "
                        "was published (bound %gs); sending it again", message.message_id,
                        message.topic, message.key, ", ".join(message.missing),
                        message.age_s(now), self.bound_s)
        return again

    def run(self, stop: threading.Event) -> None:
        """Sweep until ``stop`` is set; a lost database is retried with backoff."""
        outage = Outage("delivery watchdog", first_s=self.every_s)
        while not stop.is_set():
            try:
                self.sweep()
            except outage.transient as exc:
                stop.wait(outage.failed(exc))
                continue
            outage.recovered()
            stop.wait(self.every_s)
