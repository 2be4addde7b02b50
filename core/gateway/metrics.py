"""Prometheus collectors of the gateway, registered once on the default registry."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REPLAYS = Counter(
    "idempotent_replay", "Calls answered with the stored outcome of an earlier run."
)
DEDUP = Counter(
    "gateway_dedup",
    "Calls that did not run the executor, by reason "
    "(replay, in_progress, key_reused, stale_fence, needs_reconciliation, lost_lease).",
    ["reason"],
)
# The two hot labels, resolved once.
DEDUP_REPLAY = DEDUP.labels(reason="replay")
DEDUP_IN_PROGRESS = DEDUP.labels(reason="in_progress")
CALL_SECONDS = Histogram(
    "gateway_call_seconds",
    "Wall time of Gateway.run, executor included.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
IN_PROGRESS = Counter(
    "gateway_in_progress", "Calls that found the same key running under another owner."
)
STORE_ERRORS = Counter(
    "gateway_store_errors", "Redis or ledger operations that failed (the call failed closed)."
)
