"""Chaos: side effects through a fault-injecting proxy in front of the real Redis and PostgreSQL.
The seed's design is the bar (it loses intents and answers "dedup" with nothing to show); ours
must run every intent exactly once and give every caller that one result."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.exceptions import RedisError
from sqlalchemy import Engine, func, select

from core.db.database import make_engine
from core.db.tables import tool_call_ledger
from core.gateway import (
    CallStatus,
    Gateway,
    Ledger,
    ToolCall,
    build_gateway,
    call_key,
    redis_client,
)
from core.settings import Settings
from tests.support.chaos_proxy import ChaosProxy, Faults
from tests.support.seed_gateway import SeedGateway, SeedToolRequest, seed_redis

# Group "heavy": make test's two workers never run two of its files at once (Makefile).
# The bound is the suite's default: "ours" takes 82 s alone on this session's machine and ran
# past 150 s beside the other worker (a fresh-clone run, 2026-11-27); its callers' own budget
# (CALLER_BUDGET_S) still fails a stuck intent long before.
pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.timeout(300)]

REDIS_PORT = 6379
POSTGRES_PORT = 5432
SEED = 20240826
# The post-mortem's bar condition: 30% of Redis replies lost after the request reached Redis.
LOST_REPLIES = Faults(drop_reply=0.30)
# The "must show" network: 30% of connections refused, 30% of replies lost, resets
# mid-reply, latency.
REDIS_CHAOS = Faults(refuse=0.30, drop_reply=0.30, reset_mid_reply=0.05, delay=0.20)
# PostgreSQL through its own proxy, milder: a transaction is several round trips, so the same
# rates would make almost every ledger write fail; these still lose commit replies.
POSTGRES_CHAOS = Faults(refuse=0.05, drop_reply=0.02, reset_mid_reply=0.01, delay=0.10)

INTENTS = 1000
LEASE_S = 2.0  # executors here take microseconds; a short lease lets a stuck claim show up
CALLER_BUDGET_S = 4 * LEASE_S + 6.0  # a caller gives up (and the test fails) after this
THREADS = 24


@dataclass
class Tally:
    """What the executors did and what the callers were told: the issue's figures come from here."""

    runs: Counter[str] = field(default_factory=Counter)
    produced: dict[str, Any] = field(default_factory=dict)  # the result each executor returned
    answers: Counter[str] = field(default_factory=Counter)
    finals: dict[str, list[Any]] = field(default_factory=dict)  # what each delivery ended with
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ran(self, intent: str) -> int:
        with self.lock:
            self.runs[intent] += 1
            return self.runs[intent]

    def answered(self, kind: str) -> None:
        with self.lock:
            self.answers[kind] += 1

    def ended(self, intent: str, result: Any) -> None:
        with self.lock:
            self.finals.setdefault(intent, []).append(result)

    def never_ran(self, intents: list[str]) -> int:
        return sum(1 for intent in intents if self.runs[intent] == 0)

    def ran_twice(self) -> int:
        return sum(1 for count in self.runs.values() if count >= 2)


# -- the bar: the seed's design -------------------------------------------------------------


@pytest.mark.parametrize("faults", [LOST_REPLIES, REDIS_CHAOS], ids=["lost_replies", "chaos"])
def test_seed_design_loses_intents(redis_prefix: str, faults: Faults) -> None:
    """200 intents delivered 3 times each (one after another, as the agent re-sent them)."""
    tally = Tally()
    intents = [f"U{n}-ITEM{n % 17}-20250826" for n in range(200)]

    def create_order(args: dict[str, Any]) -> dict[str, Any]:
        run = tally.ran(args["business_id"])
        return {"order_id": f"ORD-{args['business_id']}-{run}"}

    def deliver_three_times(gateway: SeedGateway, intent: str) -> None:
        for _ in range(3):
            request = SeedToolRequest("create_order", {"business_id": intent, "amount": 2},
                                      user_id=intent.split("-")[0], session_id=f"S-{intent}")
            try:
                reply = gateway.tool_gateway(create_order, request)
            except RedisError:
                tally.answered("error")
                continue
            tally.answered("dedup_without_result" if reply["status"] == "dedup" else "result")

    with ChaosProxy(REDIS_PORT, faults, seed=SEED, time_limit_s=60) as proxy:
        gateway = SeedGateway(seed_redis(proxy.port), prefix=redis_prefix)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda intent: deliver_three_times(gateway, intent), intents))
        injected = dict(proxy.counts)

    figures = {
        "never_ran": tally.never_ran(intents),
        "ran_twice": tally.ran_twice(),
        "dedup_without_result": tally.answers["dedup_without_result"],
        "errors": tally.answers["error"],
    }
    print(f"\nSEED design, 200 intents x 3, {faults}, seed={SEED}: {figures} injected={injected}")
    assert injected.get("dropped_replies", 0) > 0
    # The bar: the seed's design loses intents and answers "dedup" with nothing to show.
    assert figures["never_ran"] > 0
    assert figures["dedup_without_result"] > 0


# -- ours -----------------------------------------------------------------------------------


@pytest.fixture
def proxied(pg_engine: Engine) -> Iterator[tuple[ChaosProxy, ChaosProxy, Engine]]:
    """Redis and PostgreSQL (this test's schema) each behind a chaos proxy; both stop by
    themselves after 100 s whatever happens."""
    with (
        ChaosProxy(REDIS_PORT, REDIS_CHAOS, seed=SEED, time_limit_s=100) as redis_proxy,
        ChaosProxy(POSTGRES_PORT, POSTGRES_CHAOS, seed=SEED + 1, time_limit_s=100) as pg_proxy,
    ):
        url = pg_engine.url.set(port=pg_proxy.port).render_as_string(hide_password=False)
        engine = make_engine(url, pool_size=THREADS)
        try:
            yield redis_proxy, pg_proxy, engine
        finally:
            engine.dispose()


def _deliveries(rng: random.Random) -> list[list[tuple[str, int]]]:
    """Groups of (intent, deliveries) to hand to the pool: a concurrent intent is k adjacent
    one-delivery tasks (picked up by k threads at once), a sequential one is one k-delivery task."""
    groups: list[list[tuple[str, int]]] = []
    for n in range(INTENTS):
        intent, k = f"U{n % 97}:ORD-{n}", rng.randint(3, 5)
        groups.append([(intent, 1)] * k if rng.random() < 0.3 else [(intent, k)])
    rng.shuffle(groups)
    return groups


Executor = Callable[[Mapping[str, Any]], Any]


def order_call(intent: str) -> ToolCall:
    user, ref = intent.split(":")
    return ToolCall("create_order", {"user": user, "order_ref": ref, "amount": 2},
                    actor="agent", session_id=f"case-{ref}", business_key=intent)


def intent_key(intent: str) -> str:
    return call_key(order_call(intent))


class Caller:
    """An agent delivering one intent: it retries errors and in_progress with bounded backoff
    until it has the result, and records every answer it got on the way."""

    def __init__(self, gateway: Gateway, tally: Tally, executor: Executor) -> None:
        self.gateway, self.tally, self.executor = gateway, tally, executor

    def deliver(self, intent: str, times: int) -> None:
        for _ in range(times):
            self.tally.ended(intent, self._until_resolved(intent))

    def _until_resolved(self, intent: str) -> Any:
        call = order_call(intent)
        deadline, pause = time.monotonic() + CALLER_BUDGET_S, 0.01
        while time.monotonic() < deadline:
            try:
                answer = self.gateway.run(call, self.executor, wait_s=0.2)
            except Exception as exc:  # a caller retries whatever went wrong
                self.tally.answered(f"error:{type(exc).__name__}")
            else:
                self.tally.answered(str(answer.status))
                if answer.status in (CallStatus.OK, CallStatus.REPLAYED):
                    return answer.result
                if answer.status is CallStatus.REFUSED:
                    self.tally.answered(f"refused:{(answer.error or {}).get('code')}")
                    return ("REFUSED", answer.error)
            time.sleep(pause)
            pause = min(pause * 2, 0.25)
        self.tally.answered("unresolved")
        return ("UNRESOLVED", None)


@pytest.mark.postgres
def test_a_lost_reply_to_the_ledger_claim_does_not_lose_the_intent(pg_engine: Engine) -> None:
    """Deterministic form of what the chaos run finds: the claim's COMMIT reached PostgreSQL,
    its reply did not. The caller retries; the intent must still run, once."""
    runs: list[int] = []

    def create_order(args: Mapping[str, Any]) -> dict[str, Any]:
        runs.append(1)
        return {"order_id": f"{args['order_ref']}-run{len(runs)}"}

    call = ToolCall("create_order", {"user": "U1", "order_ref": "ORD-1", "amount": 2},
                    actor="agent", session_id="case-ORD-1", business_key="U1:ORD-1")
    answers: list[str] = []
    with ChaosProxy(POSTGRES_PORT, seed=SEED, time_limit_s=30) as pg_proxy:
        url = pg_engine.url.set(port=pg_proxy.port).render_as_string(hide_password=False)
        engine = make_engine(url, pool_size=2)
        engine.connect().close()  # dialect start-up queries happen before the fault is armed
        gateway = build_gateway(Settings(gateway_lease_s=0.5), engine)  # the ledger alone
        pg_proxy.drop_reply_to(b"COMMIT")
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                answer = gateway.run(call, create_order, wait_s=0.2)
            except Exception as exc:  # the caller retries whatever went wrong
                answers.append(type(exc).__name__)
                continue
            answers.append(str(answer.status))
            if answer.status is not CallStatus.IN_PROGRESS:
                break
            time.sleep(0.05)
        engine.dispose()
    print(f"\nlost claim-commit reply: answers={answers} runs={len(runs)}")
    assert runs == [1]
    assert answers[-1] == "ok"


def test_ours_runs_every_intent_exactly_once(
    proxied: tuple[ChaosProxy, ChaosProxy, Engine], pg_engine: Engine, redis_prefix: str
) -> None:
    redis_proxy, pg_proxy, engine = proxied
    tally, rng = Tally(), random.Random(SEED)
    transient = random.Random(SEED + 2)

    def create_order(args: Mapping[str, Any]) -> dict[str, Any]:
        intent = f"{args['user']}:{args['order_ref']}"
        with tally.lock:
            if transient.random() < 0.03:  # the order service hiccups before doing anything
                raise ConnectionError("order service unreachable")
        run = tally.ran(intent)
        result = {"order_id": f"{args['order_ref']}-run{run}", "amount": args["amount"]}
        with tally.lock:
            tally.produced.setdefault(intent, result)
        return result

    settings = Settings(gateway_key_prefix=redis_prefix, gateway_lease_s=LEASE_S)
    client = redis_client(f"redis://127.0.0.1:{redis_proxy.port}/0", timeout_s=0.5)
    gateway = build_gateway(settings, engine, client)
    caller = Caller(gateway, tally, create_order)
    groups = _deliveries(rng)
    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(caller.deliver, intent, times)
                   for group in groups for intent, times in group]
        for future in futures:
            future.result()
    elapsed = time.monotonic() - started
    gateway.close()
    injected = {"redis": dict(redis_proxy.counts), "postgres": dict(pg_proxy.counts)}

    intents = sorted({intent for group in groups for intent, _ in group})
    wrong = {intent: [r for r in results if r != tally.produced.get(intent)]
             for intent, results in tally.finals.items()}
    wrong = {intent: results for intent, results in wrong.items() if results}
    figures = {
        "never_ran": tally.never_ran(intents),
        "ran_twice": tally.ran_twice(),
        "dedup_without_result": sum(len(results) for results in wrong.values()),
        "deliveries": sum(len(results) for results in tally.finals.values()),
    }
    print(f"\nOURS, {INTENTS} intents x 3-5 ({THREADS} threads, seed={SEED}, "
          f"{elapsed:.1f}s): {figures}\nanswers={dict(tally.answers)}\ninjected={injected}")
    if wrong:
        print("first wrong answers:", dict(list(wrong.items())[:5]))
    for label, suspects in (("never ran", [i for i in intents if tally.runs[i] == 0]),
                            ("ran twice", [i for i, c in tally.runs.items() if c >= 2])):
        for intent in suspects[:3]:  # what the ledger says about them, for the bug report
            print(label, intent, Ledger(pg_engine).entry(intent_key(intent)))

    assert figures == {"never_ran": 0, "ran_twice": 0, "dedup_without_result": 0,
                       "deliveries": figures["deliveries"]}
    assert injected["redis"].get("dropped_replies", 0) > 0
    # The durable record agrees: one finished ledger row per intent, none left in progress.
    with pg_engine.connect() as conn:
        rows = conn.execute(select(tool_call_ledger.c.state, func.count())
                            .group_by(tool_call_ledger.c.state)).all()
    states = {str(state): int(count) for state, count in rows}
    assert states == {"done": INTENTS}
