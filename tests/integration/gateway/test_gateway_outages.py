"""Failures of the stores: Redis down, timing out or flushed never lets a call run twice or
without dedup; the ledger down means nothing runs."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY
from sqlalchemy import Engine

from core.bootstrap import bootstrap
from core.db.database import make_engine
from core.errors import Unavailable
from core.gateway import (
    CallStatus,
    Gateway,
    Ledger,
    RedisClaimStore,
    ToolCall,
    call_key,
    redis_client,
)
from core.gateway.redis_store import LuaScript
from core.settings import Settings


def store_errors() -> float:
    return REGISTRY.get_sample_value("gateway_store_errors_total") or 0.0


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def silent_redis() -> Iterator[int]:
    """A port that accepts connections and never answers: Redis hanging, not refusing."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield int(server.getsockname()[1])


class Counter:
    def __init__(self) -> None:
        self.runs = 0
        self._lock = threading.Lock()

    def __call__(self, args: Mapping[str, Any]) -> Any:
        with self._lock:
            self.runs += 1
        return {"charged": args["amount"]}


def charge(ref: str = "r1") -> ToolCall:
    return ToolCall("charge", {"user": "u1", "amount": 30}, "agent", "case-1",
                    business_key=f"u1:{ref}")


@pytest.mark.parametrize("redis_port", ["refusing", "silent"])
def test_redis_down_or_hanging_still_runs_exactly_once_through_the_ledger(
        engine: Engine, redis_port: str, request: pytest.FixtureRequest) -> None:
    port = closed_port() if redis_port == "refusing" else request.getfixturevalue("silent_redis")
    dead = redis_client(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
    gateway = Gateway(Ledger(engine), RedisClaimStore(dead, "unused:"), redis_cooldown_s=0.0)
    executor, errors_before = Counter(), store_errors()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: gateway.run(charge(), executor, wait_s=20.0), range(8)))
    results.append(gateway.run(charge(), executor))
    assert executor.runs == 1
    assert sorted(r.status for r in results).count(CallStatus.OK) == 1
    assert {r.status for r in results} == {CallStatus.OK, CallStatus.REPLAYED}
    assert {r.result["charged"] for r in results} == {30}
    assert store_errors() - errors_before >= 9
    dead.close()


def test_after_a_redis_error_the_gateway_skips_redis_for_a_cooldown(engine: Engine) -> None:
    dead = redis_client(f"redis://127.0.0.1:{closed_port()}/0", timeout_s=0.2)
    gateway = Gateway(Ledger(engine), RedisClaimStore(dead, "unused:"), redis_cooldown_s=60)
    executor, errors_before = Counter(), store_errors()
    for ref in ("a", "b", "c"):
        assert gateway.run(charge(ref), executor).status is CallStatus.OK
    # Only the first call paid: its claim failed, and it tried to finish the Redis claim
    # that may have landed despite the error. The next two skipped Redis.
    assert store_errors() - errors_before == 2
    dead.close()


def test_redis_flushed_between_attempts_the_ledger_stops_the_repeat(
        engine: Engine, redis_client: redis.Redis, redis_prefix: str) -> None:
    gateway = Gateway(Ledger(engine), RedisClaimStore(redis_client, redis_prefix))
    executor = Counter()
    first = gateway.run(charge(), executor)
    assert redis_client.exists(redis_prefix + first.key)
    flush(redis_client, redis_prefix)
    again = gateway.run(charge(), executor)
    assert (again.status, again.result) == (CallStatus.REPLAYED, first.result)
    assert executor.runs == 1
    # The ledger's answer went back into Redis: the next repeat is one round trip again.
    assert redis_client.hget(redis_prefix + first.key, "state") == b"done"


def test_redis_flushed_during_a_run_the_ledger_answers_in_progress(
        engine: Engine, redis_client: redis.Redis, redis_prefix: str) -> None:
    gateway = Gateway(Ledger(engine), RedisClaimStore(redis_client, redis_prefix))
    started, finish, executor = threading.Event(), threading.Event(), Counter()

    def slow(args: Mapping[str, Any]) -> Any:
        started.set()
        assert finish.wait(10)
        return executor(args)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(gateway.run, charge(), slow)
        assert started.wait(10)
        flush(redis_client, redis_prefix)
        during = gateway.run(charge(), executor)
        waiting = pool.submit(gateway.run, charge(), executor, wait_s=10.0)
        time.sleep(0.05)
        finish.set()
        assert first.result().status is CallStatus.OK
        assert waiting.result().status is CallStatus.REPLAYED
    assert during.status is CallStatus.IN_PROGRESS
    assert executor.runs == 1


def flush(client: redis.Redis, prefix: str) -> None:
    """FLUSHDB as far as this test's keys go (a real FLUSHDB would wipe other tests' keys on
    the shared server)."""
    keys = list(client.scan_iter(match=f"{prefix}*"))
    assert keys, "nothing to flush: the test would prove nothing"
    client.delete(*keys)


def test_the_ledger_down_means_nothing_runs(redis_client: redis.Redis,
                                            redis_prefix: str) -> None:
    dead_db = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/test",
                          pool_size=1)
    gateway = Gateway(Ledger(dead_db), RedisClaimStore(redis_client, redis_prefix),
                      store_patience_s=0.2)
    executor = Counter()
    with pytest.raises(Unavailable):
        gateway.run(charge(), executor)
    assert executor.runs == 0
    # The Redis claim was given back: once the ledger is back, the call can run.
    assert list(redis_client.scan_iter(match=f"{redis_prefix}*")) == []
    dead_db.dispose()


def test_a_script_unknown_to_the_server_is_loaded_on_noscript(redis_client: redis.Redis) -> None:
    script = LuaScript(f"-- {uuid.uuid4().hex}\nreturn ARGV[1]")
    assert redis_client.script_exists(script.sha) == [False]
    assert script(redis_client, [], ["hello"]) == b"hello"
    assert redis_client.script_exists(script.sha) == [True]


def test_bootstrap_without_a_redis_url_uses_the_ledger_alone(tmp_path: Any) -> None:
    app = bootstrap(Settings(database_url=f"sqlite:///{tmp_path / 'app.db'}", redis_url=None))
    try:
        assert app.gateway.claims is None
        assert app.gateway.lease_s == 30.0 and app.gateway.result_ttl_s == 86400
    finally:
        app.close()


def test_bootstrap_with_a_redis_url_puts_redis_in_front(tmp_path: Any,
                                                        redis_client: redis.Redis) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'app.db'}",
                        redis_url="redis://127.0.0.1:6379/0",
                        gateway_key_prefix=f"test:{uuid.uuid4().hex[:8]}:")
    app = bootstrap(settings)
    try:
        assert app.gateway.claims is not None
        assert app.gateway.claims.prefix == settings.gateway_key_prefix
        pool = app.gateway.claims.client.connection_pool
        assert pool.connection_kwargs["socket_timeout"] == settings.gateway_redis_timeout_s
    finally:
        app.close()


class RepliesLost(Ledger):
    """The real ledger, but the first ``lose`` replies of ``operation`` never reach the gateway:
    the write committed, the caller heard an error (a connection cut after COMMIT)."""

    def __init__(self, engine: Engine, operation: str, lose: int) -> None:
        super().__init__(engine)
        self.operation, self.lose = operation, lose

    def _maybe_lose(self, answer: Any) -> Any:
        if self.lose > 0:
            self.lose -= 1
            raise Unavailable("the connection dropped after COMMIT")
        return answer

    def claim(self, intent: Any) -> Any:
        answer = super().claim(intent)
        return self._maybe_lose(answer) if self.operation == "claim" else answer

    def complete(self, key: str, owner: str, outcome: Any, business_key: Any = None) -> Any:
        answer = super().complete(key, owner, outcome, business_key)
        return self._maybe_lose(answer) if self.operation == "complete" else answer


@pytest.mark.parametrize("operation", ["claim", "complete"])
def test_a_lost_ledger_reply_neither_loses_nor_repeats_the_call(engine: Engine,
                                                               operation: str) -> None:
    ledger = RepliesLost(engine, operation, lose=1)
    gateway, executor = Gateway(ledger), Counter()
    lost_lease_before = REGISTRY.get_sample_value("gateway_dedup_total",
                                                  {"reason": "lost_lease"}) or 0.0
    result = gateway.run(charge(), executor)
    assert (result.status, result.result, result.attempts) == (CallStatus.OK, {"charged": 30}, 1)
    assert executor.runs == 1
    entry = ledger.entry(result.key)
    assert entry is not None and entry.state == "done"
    assert (REGISTRY.get_sample_value("gateway_dedup_total", {"reason": "lost_lease"})
            or 0.0) == lost_lease_before


def test_a_claim_that_never_hears_back_is_given_back_for_the_retry(engine: Engine) -> None:
    ledger = RepliesLost(engine, "claim", lose=10**6)  # no try of the claim hears back
    gateway, executor = Gateway(ledger, store_patience_s=0.3), Counter()
    with pytest.raises(Unavailable):
        gateway.run(charge(), executor)
    assert executor.runs == 0
    ledger.lose = 0
    entry = ledger.entry(call_key(charge(), gateway.scope))
    assert entry is not None and entry.state == "released"
    assert gateway.run(charge(), executor).status is CallStatus.OK
    assert executor.runs == 1
