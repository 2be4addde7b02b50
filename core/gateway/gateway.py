"""The tool gateway: every side effect runs at most once per idempotency key, and every repeat
gets the first run's outcome.

Order of a call: Redis claim-or-replay (one round trip; a replay ends here) → the ledger claims
the key durably (it alone decides who runs, so a flushed or failed-over Redis cannot cause a
repeat) → the body runs → the outcome goes to the ledger, then to Redis. Redis down or
timing out: the ledger decides alone (fail closed); the ledger down: nothing runs. An outcome
that arrives after its lease was lost is recorded as unknown (the ledger's rule), never as a
fact, and never reaches Redis.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import redis

from core.errors import KeyReuse, StaleFence, Unavailable
from core.gateway import metrics
from core.gateway.keys import args_hash, call_key
from core.gateway.ledger import Completion, Intent, Ledger, LedgerClaim, LedgerEntry
from core.gateway.model import (
    BusinessRefusal,
    CallResult,
    CallStatus,
    Outcome,
    ToolBody,
    ToolCall,
    refusal,
)
from core.gateway.redis_store import Claim, RedisClaimStore
from core.gateway.registry import SideEffect
from core.gateway.session_lock import SessionLock

log = logging.getLogger(__name__)

T = TypeVar("T")

_REFUSALS = {
    "mismatch": (KeyReuse.code,
                 "this idempotency key was used before with different arguments"),
    "stale_fence": (StaleFence.code,
                    "the fence token is lower than the highest issued for the session"),
    "needs_reconciliation": (
        "needs_reconciliation",
        "an earlier run may have happened without its result being stored; reconcile it"),
    "unknown_outcome": (
        "unknown_outcome",
        "the call finished after its lease ended, so whether it took effect is unknown; "
        "a person checks the target"),
}
_DEDUP_REASON = {"mismatch": "key_reused", "stale_fence": "stale_fence",
                 "needs_reconciliation": "needs_reconciliation",
                 "unknown_outcome": "lost_lease"}


def jsonable(value: Any) -> Any:
    """The result as every replay will see it (JSON round trip), so the first caller and the
    repeats get equal values. Never fails: the record of a side effect must be kept."""
    return json.loads(json.dumps(value, default=str))


class Gateway:
    """Runs executors under idempotency keys, leases, owner tokens and fences."""

    def __init__(self, ledger: Ledger, claims: RedisClaimStore | None = None, *,
                 locks: SessionLock | None = None, lease_s: float = 30.0,
                 result_ttl_s: int = 86400, scope: str = "",
                 redis_cooldown_s: float = 1.0, store_patience_s: float = 2.0) -> None:
        self.ledger = ledger
        self.claims = claims
        self.locks = locks
        self.lease_s = lease_s
        self.result_ttl_s = result_ttl_s
        self.scope = scope
        self.redis_cooldown_s = redis_cooldown_s
        self.store_patience_s = store_patience_s
        self._redis_down_until = 0.0

    # -- the public surface ---------------------------------------------------------------

    def run(self, call: ToolCall, body: ToolBody, *, fence: int | None = None,
            wait_s: float = 0.0, idempotent: bool = False,
            lease_s: float | None = None) -> CallResult:
        """Run ``body(call.args)`` at most once per key; ``wait_s`` > 0 lets a duplicate
        that finds the call running wait (bounded) for its outcome. ``lease_s`` overrides the
        configured lease for this call: a call that may run longer than the lease (a plan
        step with its own timeout) must ask for more, or a repeat could claim it mid-run."""
        started = time.perf_counter()
        # The owner token exists before the first store is touched: a retried claim whose
        # reply was lost then recognises itself ("mine") instead of answering "duplicate".
        fingerprint = args_hash(call.args)
        intent = Intent(key=call_key(call, self.scope, fingerprint), call=call,
                        args_hash=fingerprint, owner=uuid.uuid4().hex, fence=fence,
                        idempotent=idempotent,
                        lease_s=self.lease_s if lease_s is None else lease_s)
        result = self._attempt(intent, body)
        if result.status is CallStatus.IN_PROGRESS:
            metrics.IN_PROGRESS.inc()
            metrics.DEDUP_IN_PROGRESS.inc()
            result = self._wait(intent, body, result, started + wait_s)
        elapsed = time.perf_counter() - started
        metrics.CALL_SECONDS.observe(elapsed)
        return replace(result, latency_s=elapsed)

    def invoke(self, effect: SideEffect, args: Mapping[str, Any], *, actor: str,
               session_id: str, fence: int | None = None, wait_s: float = 0.0) -> CallResult:
        """Run a ``@side_effect`` function under the gateway: the only way to run it."""
        call = ToolCall(effect.tool, args, actor, session_id, effect.business_key(args))
        return self.run(call, effect.body(), fence=fence, wait_s=wait_s,
                        idempotent=effect.idempotent)

    def stuck_calls(self, limit: int = 100) -> list[LedgerEntry]:
        """Calls in progress past their lease, for ``opsgate reconcile``."""
        return self.ledger.stuck(limit=limit)

    def close(self) -> None:
        if self.claims is not None:
            self.claims.client.close()

    # -- one attempt ----------------------------------------------------------------------

    def _wait(self, intent: Intent, body: ToolBody, result: CallResult,
              deadline: float) -> CallResult:
        pause = 0.005
        while result.status is CallStatus.IN_PROGRESS and time.perf_counter() < deadline:
            time.sleep(min(pause, max(0.0, deadline - time.perf_counter())))
            pause = min(pause * 2, 0.1)
            result = self._attempt(intent, body)
        return result

    def _attempt(self, intent: Intent, body: ToolBody) -> CallResult:
        fast = self._redis_claim(intent)
        if fast is not None and fast.outcome == "replay":
            return self._replayed(intent, Outcome.from_json(json.loads(fast.result or "{}")))
        if fast is not None and fast.outcome == "mismatch":
            return self._refused(intent, "mismatch")
        if fast is not None and fast.outcome == "in_progress":
            return CallResult(CallStatus.IN_PROGRESS, intent.key, fence=intent.fence)
        # Redis has no finished record (or is unreachable): the ledger decides. ``held``: we
        # hold a Redis claim, or may (the claim's reply was lost), and must finish or free it.
        held = fast is not None
        durable = self._ledger_claim(intent, held)
        return self._after_ledger_claim(intent, body, durable, held)

    def _ledger_claim(self, intent: Intent, held: bool) -> LedgerClaim:
        # Same owner token on every try: a claim whose COMMIT reply was lost is ours. Half the
        # lease at most, so a claim we could not confirm is still ours to give back.
        patience = min(self.store_patience_s, intent.lease_s / 2)
        claimed = self._ledger_retry(lambda: self.ledger.claim(intent), patience)
        if claimed is not None:
            return claimed
        # Nothing ran. Give back a claim that may have landed, so a later retry can run.
        self._ledger_retry(lambda: self.ledger.release(intent.key, intent.owner),
                           self.store_patience_s)
        self._redis_release(intent, held)
        raise Unavailable("the tool call ledger is unavailable; nothing ran; retry",
                          key=intent.key)

    def _after_ledger_claim(self, intent: Intent, body: ToolBody,
                            durable: LedgerClaim, held: bool) -> CallResult:
        if durable.outcome == "claimed":
            return self._execute(intent, body, durable.attempts, held)
        if durable.outcome == "replay":
            assert durable.stored is not None
            self._redis_complete(intent, durable.stored, held)  # warm Redis for the repeats
            return self._replayed(intent, durable.stored)
        self._redis_release(intent, held)
        if durable.outcome == "in_progress":
            return CallResult(CallStatus.IN_PROGRESS, intent.key, fence=intent.fence,
                              attempts=durable.attempts)
        return self._refused(intent, durable.outcome, latest=durable.latest_fence)

    def _execute(self, intent: Intent, body: ToolBody, attempts: int,
                 held: bool) -> CallResult:
        try:
            value = body(intent.call.args)
        except BusinessRefusal as no:
            outcome = Outcome(error=no.to_error(), fence=intent.fence, attempts=attempts)
            return self._store(intent, outcome, CallStatus.REFUSED, held)
        except Exception:
            self._give_back(intent, held)
            raise
        outcome = Outcome(result=jsonable(value), fence=intent.fence, attempts=attempts)
        return self._store(intent, outcome, CallStatus.OK, held)

    def _store(self, intent: Intent, outcome: Outcome, status: CallStatus,
               held: bool) -> CallResult:
        # The effect happened: keep trying to record it for as long as the lease lasts (at
        # least the store patience) rather than leave a call for reconciliation.
        completed = self._ledger_retry(
            lambda: self.ledger.complete(intent.key, intent.owner, outcome,
                                         intent.call.business_key),
            max(self.store_patience_s, intent.lease_s))
        if completed is Completion.TAKEN_OVER:
            return self._lost_lease(intent, outcome, status)
        if completed is Completion.UNKNOWN:
            return self._unknown_outcome(intent, outcome, held)
        # None: the ledger stayed unreachable; the row stays in_progress and is reported by
        # stuck_calls() once its lease ends. Redis still gets the outcome for the repeats.
        self._redis_complete(intent, outcome, held)
        return CallResult(status, intent.key, result=outcome.result, error=outcome.error,
                          fence=outcome.fence, attempts=outcome.attempts)

    def _unknown_outcome(self, intent: Intent, outcome: Outcome, held: bool) -> CallResult:
        """Our lease ended while the body ran and nobody took over: the ledger records the
        outcome as unknown; Redis gets nothing to replay (our claim there is given back)."""
        log.warning("gateway: %s of %s finished after its lease ended; its outcome is recorded "
                    "as unknown", intent.call.tool, intent.key)
        self._redis_release(intent, held)
        refused = self._refused(intent, "unknown_outcome")
        return replace(refused, result=outcome.result, attempts=outcome.attempts)

    def _lost_lease(self, intent: Intent, outcome: Outcome, status: CallStatus) -> CallResult:
        """Our lease ended and another owner re-claimed: the ledger's record wins; ours is kept
        in a late row of its own as an unknown outcome (``Ledger.complete``)."""
        metrics.DEDUP.labels(reason="lost_lease").inc()
        log.warning("gateway: lease of %s lost while %s ran; its outcome was not stored",
                    intent.key, intent.call.tool)
        try:
            entry = self.ledger.entry(intent.key)
        except Unavailable:
            entry = None  # the effect happened: answer with it rather than an error
        if entry is not None and entry.state in ("done", "refused"):
            stored = Outcome(result=entry.result, error=entry.error, fence=entry.fence,
                             attempts=entry.attempts)
            return self._replayed(intent, stored)
        return CallResult(status, intent.key, result=outcome.result, error=outcome.error,
                          fence=outcome.fence, attempts=outcome.attempts)

    def _give_back(self, intent: Intent, held: bool) -> None:
        """A transient failure: release both claims (compare-and-set) so a retry may run."""
        self._ledger_retry(lambda: self.ledger.release(intent.key, intent.owner),
                           self.store_patience_s)
        self._redis_release(intent, held)

    # -- envelopes ------------------------------------------------------------------------

    @staticmethod
    def _replayed(intent: Intent, stored: Outcome) -> CallResult:
        metrics.REPLAYS.inc()
        metrics.DEDUP_REPLAY.inc()
        return CallResult(CallStatus.REPLAYED, intent.key, result=stored.result,
                          error=stored.error, fence=stored.fence, attempts=stored.attempts)

    @staticmethod
    def _refused(intent: Intent, why: str, latest: int | None = None) -> CallResult:
        metrics.DEDUP.labels(reason=_DEDUP_REASON[why]).inc()
        code, message = _REFUSALS[why]
        details: dict[str, Any] = {"key": intent.key, "tool": intent.call.tool}
        if why == "stale_fence":
            details.update(session_id=intent.call.session_id, fence=intent.fence, latest=latest)
        return CallResult(CallStatus.REFUSED, intent.key, error=refusal(code, message, **details),
                          fence=intent.fence)

    # -- stores ---------------------------------------------------------------------------

    @staticmethod
    def _ledger_retry(operation: Callable[[], T], patience_s: float) -> T | None:
        """A ledger operation, retried with backoff for ``patience_s``; None if it never got
        through. Safe to repeat: every operation is keyed by the owner token."""
        deadline, pause = time.monotonic() + patience_s, 0.01
        while True:
            try:
                return operation()
            except Unavailable:
                metrics.STORE_ERRORS.inc()
                if time.monotonic() + pause > deadline:
                    log.error("gateway: the ledger stayed unreachable for %.1fs", patience_s)
                    return None
                time.sleep(pause)
                pause = min(pause * 2, 0.25)

    def _redis_usable(self) -> bool:
        return self.claims is not None and time.monotonic() >= self._redis_down_until

    def _redis_failed(self, exc: redis.RedisError) -> None:
        metrics.STORE_ERRORS.inc()
        self._redis_down_until = time.monotonic() + self.redis_cooldown_s
        log.warning("gateway: Redis failed (%s); the ledger decides alone", exc)

    def _redis_claim(self, intent: Intent) -> Claim | None:
        """Redis's answer; ``unknown`` if the claim failed (it may have landed); None if Redis
        is not used for this call."""
        if not self._redis_usable():
            return None
        assert self.claims is not None
        try:
            return self.claims.claim_or_replay(intent.key, intent.args_hash, intent.owner,
                                               max(1, int(intent.lease_s * 1000)))
        except redis.RedisError as exc:
            self._redis_failed(exc)
            return Claim("unknown")

    def _redis_complete(self, intent: Intent, outcome: Outcome, held: bool) -> None:
        # Tried even during the cooldown when we may hold the claim: otherwise repeats would
        # see our stale "running" record until its lease ends.
        if not held or self.claims is None:
            return
        body = json.dumps(outcome.to_json(), separators=(",", ":"))
        try:
            self.claims.complete(intent.key, intent.owner, body, self.result_ttl_s)
        except redis.RedisError as exc:
            self._redis_failed(exc)

    def _redis_release(self, intent: Intent, held: bool) -> None:
        if not held or self.claims is None:
            return
        try:
            self.claims.release(intent.key, intent.owner)
        except redis.RedisError as exc:
            self._redis_failed(exc)
