"""The gateway's contract on real stores: every test runs on SQLite and PostgreSQL, with the
ledger alone and with Redis in front of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine

from core.gateway import (
    BusinessRefusal,
    CallStatus,
    DirectSideEffectCall,
    Gateway,
    Ledger,
    LedgerState,
    RedisClaimStore,
    ToolCall,
    call_key,
    side_effect,
)
from tests.support.clock import Clock, let_redis_time_pass

# Group "heavy": make test's two workers never run two of its files at once (Makefile).

BuildGateway = Callable[..., Gateway]


@pytest.fixture(params=["ledger", "redis"])
def claims(request: pytest.FixtureRequest) -> RedisClaimStore | None:
    """Redis in front of the ledger (own key prefix), or the ledger alone."""
    if request.param == "ledger":
        return None
    return RedisClaimStore(request.getfixturevalue("redis_client"),
                           request.getfixturevalue("redis_prefix"))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def build_gateway(claims: RedisClaimStore | None, engine: Engine, clock: Clock) -> BuildGateway:
    """Gateways on this test's database whose ledger reads the test's clock."""

    def build(**options: Any) -> Gateway:
        return Gateway(Ledger(engine, clock=clock), claims, **options)

    return build


@pytest.fixture
def lapse(claims: RedisClaimStore | None, clock: Clock) -> Callable[[float], None]:
    """Let time pass for the claims: the ledger's clock moves, Redis' keys age as much."""

    def let_pass(seconds: float) -> None:
        clock.advance(seconds)
        if claims is not None:
            let_redis_time_pass(claims.client, claims.prefix, seconds)

    return let_pass


@pytest.fixture
def gateway(build_gateway: BuildGateway) -> Gateway:
    return build_gateway()


class CountingExecutor:
    """An executor that counts its own runs: the ground truth of "ran once"."""

    def __init__(self, work: Callable[[Mapping[str, Any]], Any] | None = None) -> None:
        self.runs = 0
        self._lock = threading.Lock()
        self._work = work

    def __call__(self, args: Mapping[str, Any]) -> Any:
        with self._lock:
            self.runs += 1
            order = self.runs
        if self._work is not None:
            return self._work(args)
        return {"order_id": f"ORD-{args['order_ref']}-{order}", "amount": args.get("amount")}


def order_call(ref: str = "r1", amount: Any = 10, **overrides: Any) -> ToolCall:
    fields: dict[str, Any] = {"tool": "create_order", "actor": "agent", "session_id": "case-1",
                              "args": {"user": "u1", "order_ref": ref, "amount": amount},
                              "business_key": f"u1:{ref}"}
    return ToolCall(**{**fields, **overrides})


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_first_run_is_ok_and_recorded_in_the_ledger(gateway: Gateway) -> None:
    executor = CountingExecutor()
    timed_before = sample("gateway_call_seconds_count")
    result = gateway.run(order_call(), executor, fence=None)
    assert sample("gateway_call_seconds_count") == timed_before + 1
    assert result.status is CallStatus.OK
    assert result.result == {"order_id": "ORD-r1-1", "amount": 10}
    assert result.latency_s > 0
    entry = gateway.ledger.entry(result.key)
    assert entry is not None
    assert (entry.state, entry.tool, entry.actor, entry.session_id, entry.attempts) == (
        LedgerState.DONE, "create_order", "agent", "case-1", 1)
    assert entry.result == result.result
    assert entry.started_at is not None and entry.finished_at is not None


def test_a_repeat_replays_the_first_result_without_running(gateway: Gateway) -> None:
    executor = CountingExecutor()
    replays_before = sample("idempotent_replay_total")
    first = gateway.run(order_call(), executor)
    repeats = [gateway.run(order_call(amount=10.0), executor) for _ in range(3)]
    assert executor.runs == 1
    assert {r.status for r in repeats} == {CallStatus.REPLAYED}
    assert all(r.result == first.result and r.key == first.key for r in repeats)
    assert sample("idempotent_replay_total") - replays_before == 3


def test_the_same_key_with_other_args_is_refused_and_nothing_runs(gateway: Gateway) -> None:
    executor = CountingExecutor()
    reused_before = sample("gateway_dedup_total", reason="key_reused")
    gateway.run(order_call(amount=10), executor)
    refused = gateway.run(order_call(amount=99), executor)
    assert refused.status is CallStatus.REFUSED
    assert refused.error is not None and refused.error["code"] == "idempotency_key_reused"
    assert executor.runs == 1
    assert sample("gateway_dedup_total", reason="key_reused") - reused_before == 1


def test_a_duplicate_during_the_run_is_in_progress_then_gets_the_result(
        gateway: Gateway) -> None:
    started, finish = threading.Event(), threading.Event()

    def slow(args: Mapping[str, Any]) -> Any:
        started.set()
        assert finish.wait(10)
        return {"order_id": "ORD-slow"}

    executor = CountingExecutor(slow)
    in_progress_before = sample("gateway_in_progress_total")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(gateway.run, order_call(), executor)
        assert started.wait(10)
        impatient = gateway.run(order_call(), executor)
        patient = pool.submit(gateway.run, order_call(), executor, wait_s=10.0)
        time.sleep(0.1)
        finish.set()
        assert first.result().status is CallStatus.OK
        waited = patient.result()
    assert impatient.status is CallStatus.IN_PROGRESS
    assert impatient.result is None
    assert waited.status is CallStatus.REPLAYED
    assert waited.result == {"order_id": "ORD-slow"}
    assert executor.runs == 1
    assert sample("gateway_in_progress_total") - in_progress_before >= 2


def test_fifty_concurrent_identical_calls_run_once(gateway: Gateway) -> None:
    barrier = threading.Barrier(50)

    def slowish(args: Mapping[str, Any]) -> Any:
        time.sleep(0.05)  # keep the first run open while the others arrive
        return {"order_id": "ORD-once"}

    executor = CountingExecutor(slowish)

    def deliver(_: int) -> Any:
        barrier.wait()
        return gateway.run(order_call(), executor, wait_s=20.0)

    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(deliver, range(50)))
    assert executor.runs == 1
    statuses = [r.status for r in results]
    assert statuses.count(CallStatus.OK) == 1
    assert statuses.count(CallStatus.REPLAYED) == 49
    assert {str(r.result) for r in results} == {"{'order_id': 'ORD-once'}"}


def test_a_business_refusal_is_stored_and_replayed(gateway: Gateway) -> None:
    def broke(args: Mapping[str, Any]) -> Any:
        raise BusinessRefusal("insufficient funds", code="insufficient_funds", balance=3)

    executor = CountingExecutor(broke)
    first = gateway.run(order_call(), executor)
    again = gateway.run(order_call(), executor)
    expected = {"code": "insufficient_funds", "message": "insufficient funds",
                "details": {"balance": 3}}
    assert (first.status, first.error) == (CallStatus.REFUSED, expected)
    assert (again.status, again.error) == (CallStatus.REPLAYED, expected)
    assert not again.ok
    assert executor.runs == 1
    entry = gateway.ledger.entry(first.key)
    assert entry is not None and entry.state is LedgerState.REFUSED


def test_a_transient_failure_releases_the_claim_and_a_retry_runs(gateway: Gateway) -> None:
    failures = iter([ConnectionResetError("downstream hung up")])

    def flaky(args: Mapping[str, Any]) -> Any:
        for failure in failures:
            raise failure
        return {"order_id": "ORD-second-try"}

    executor = CountingExecutor(flaky)
    with pytest.raises(ConnectionResetError):
        gateway.run(order_call(), executor)
    entry = gateway.ledger.entry(call_key(order_call(), gateway.scope))
    assert entry is not None and entry.state is LedgerState.RELEASED
    retry = gateway.run(order_call(), executor)
    assert (retry.status, retry.result, retry.attempts) == (
        CallStatus.OK, {"order_id": "ORD-second-try"}, 2)
    assert executor.runs == 2
    assert gateway.run(order_call(), executor).status is CallStatus.REPLAYED


class Crash(BaseException):
    """The process dies: nothing after the executor runs, not even the gateway's handlers."""


def test_a_crash_after_the_run_is_reported_not_run_again(build_gateway: BuildGateway,
                                                         lapse: Callable[[float], None]) -> None:
    gateway = build_gateway(lease_s=0.5)
    ran = CountingExecutor()

    def crash_after_effect(args: Mapping[str, Any]) -> Any:
        ran(args)
        raise Crash

    with pytest.raises(Crash):
        gateway.run(order_call(), crash_after_effect)
    assert gateway.run(order_call(), ran).status is CallStatus.IN_PROGRESS  # lease still held
    lapse(0.6)
    later = gateway.run(order_call(), ran, wait_s=0.2)
    assert later.status is CallStatus.REFUSED
    assert later.error is not None and later.error["code"] == "needs_reconciliation"
    assert ran.runs == 1
    stuck = gateway.stuck_calls()
    assert [(s.key, s.tool, s.state) for s in stuck] == [
        (later.key, "create_order", LedgerState.IN_PROGRESS)]


def test_an_idempotent_tool_past_its_lease_may_run_again(build_gateway: BuildGateway,
                                                         lapse: Callable[[float], None]) -> None:
    gateway = build_gateway(lease_s=0.2)
    ran = CountingExecutor()

    def crash_after_effect(args: Mapping[str, Any]) -> Any:
        ran(args)
        raise Crash

    with pytest.raises(Crash):
        gateway.run(order_call(), crash_after_effect, idempotent=True)
    lapse(0.3)
    again = gateway.run(order_call(), ran, idempotent=True)
    assert (again.status, again.attempts) == (CallStatus.OK, 2)
    assert ran.runs == 2
    assert gateway.stuck_calls() == []


@side_effect("create_order", business_key=lambda args: f"{args['user']}:{args['order_ref']}")
def create_order(args: Mapping[str, Any]) -> dict[str, Any]:
    """A declared side effect: only the gateway may run it."""
    return {"order_id": f"ORD-{args['order_ref']}"}


def test_a_declared_side_effect_runs_only_through_the_gateway(gateway: Gateway) -> None:
    args = {"user": "u1", "order_ref": "r9", "amount": 5}
    with pytest.raises(DirectSideEffectCall, match=r"gateway\.invoke"):
        create_order(args)
    first = gateway.invoke(create_order, args, actor="agent", session_id="case-1")
    again = gateway.invoke(create_order, {**args, "amount": 5.0}, actor="agent",
                           session_id="case-1")
    reused = gateway.invoke(create_order, {**args, "amount": 6}, actor="agent",
                            session_id="case-1")
    assert (first.status, first.result) == (CallStatus.OK, {"order_id": "ORD-r9"})
    assert again.status is CallStatus.REPLAYED
    assert reused.error is not None and reused.error["code"] == "idempotency_key_reused"
    declared = ToolCall("create_order", args, "agent", "case-1", business_key="u1:r9")
    assert first.key == call_key(declared, gateway.scope)
