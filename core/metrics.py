"""Prometheus collectors of the core, declared once (names as in the seed's metric set)."""

from __future__ import annotations

from prometheus_client import Counter

OUTBOX_PUBLISH = Counter(
    "outbox_publish_total", "Outbox rows handed to the bus.", ["topic", "status"]
)
INBOX_DEDUP = Counter(
    "inbox_dedup_total", "Redelivered messages a consumer recognised and skipped.", ["consumer"]
)
DEAD_LETTERS = Counter(
    "dead_letter_total", "Messages a consumer gave up on after its retries.", ["consumer", "topic"]
)
