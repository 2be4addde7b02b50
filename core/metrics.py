"""Prometheus collectors of the core, declared once (names as in the seed's metric set)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from core.errors import IllegalTransition, OpsgateError, PreconditionFailed, Unprocessable
from core.gateway.metrics import REPLAYS  # idempotent_replay_total: gateway and case service

OUTBOX_PUBLISH = Counter(
    "outbox_publish_total", "Outbox rows handed to the bus.", ["topic", "status"]
)
INBOX_DEDUP = Counter(
    "inbox_dedup_total", "Redelivered messages a consumer recognised and skipped.", ["consumer"]
)
DEAD_LETTERS = Counter(
    "dead_letter_total", "Messages a consumer gave up on after its retries.", ["consumer", "topic"]
)
DELIVERY_RESENT = Counter(
    "delivery_resent_total",
    "Published messages sent again because a consumer had not recorded them within the bound.",
    ["topic"],
)
WORKER_OUTAGE = Gauge(
    "opsgate_worker_outage",
    "1 while a long-running worker (relay, consumer, delivery watchdog) retries a lost "
    "database or Redis, else 0.",
    ["worker"],
)
CASE_TRANSITIONS = Counter(
    "case_transition_total",
    "Committed case transitions (an open is from=NONE).",
    ["from", "to", "event"],
)
CONFLICTS = Counter(
    "conflict_total",
    "Refused case writes by HTTP status: 409 illegal, 412 version/fence, 422 guard/key reuse.",
    ["reason"],
)
ALERT_REFUSALS = Counter(
    "alert_notification_refused_total",
    "Alertmanager notifications answered with an error, by reason: unauthorized, not_json, "
    "not_webhook, too_large (4xx: Alertmanager drops them) or unavailable, internal (5xx: "
    "Alertmanager retries).",
    ["reason"],
)
_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
ADAPTER_STEP_SECONDS = Histogram(
    "adapter_step_latency_seconds",
    "Wall time of one plan step through its adapter.",
    ["action"],
    buckets=_STEP_BUCKETS,
)
VERIFY_SECONDS = Histogram(
    "verify_latency_seconds", "Wall time of one verification of a case.", buckets=_STEP_BUCKETS
)
SLACK_ACK_SECONDS = Histogram(
    "slack_ack_seconds",
    "Time from receiving a Slack request to its ack (Slack wants it under 3 s).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0),
)

# The refusals counted, labelled as the API answers them (the label values are a documented
# part of the metric, kept as they were when the service itself spoke HTTP).
_CONFLICT_REASONS: tuple[tuple[type[OpsgateError], str], ...] = (
    (IllegalTransition, "409"), (PreconditionFailed, "412"), (Unprocessable, "422"))


def count_write(refusal: OpsgateError | None, replayed: bool,
                timeline: Mapping[str, Any] | None) -> None:
    """Count one committed case-service write: a replay, a refusal (an illegal move, a stale
    version or fence, a guard or a reused key) or, when its timeline row records an accepted
    move or an open, the transition."""
    if replayed:
        REPLAYS.inc()
        return
    reason = next((label for kind, label in _CONFLICT_REASONS if isinstance(refusal, kind)),
                  None)
    if reason is not None:
        CONFLICTS.labels(reason=reason).inc()
    if timeline is None:
        return
    meta = timeline.get("meta") or {}
    if meta.get("outcome") in ("accepted", "opened"):
        CASE_TRANSITIONS.labels(**{"from": str(meta.get("from") or "NONE"),
                                   "to": str(meta.get("to")),
                                   "event": str(timeline.get("event"))}).inc()
