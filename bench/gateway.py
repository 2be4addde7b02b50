"""Benchmark: the gateway's Redis path (first arrival, replay) beside a bare PING and a naive
three-round-trip gateway (INCR fence; SET NX; GET/SET result), all in one run on 127.0.0.1.

Two figures for ours: the Redis store path (the claim/replay/complete Lua calls exactly as the
gateway issues them) and the full ``Gateway.run`` (key hashing, envelopes, metrics and, on first
arrival, the SQL ledger on PostgreSQL). Targets (issue 3): replay <= 1.3x a PING, first arrival
<= 2.5x a PING, and >= 1.5x the naive gateway's throughput on both paths. Figures last, as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import redis
from sqlalchemy import Engine

from core.gateway import (
    CallStatus,
    Gateway,
    Ledger,
    RedisClaimStore,
    ToolCall,
    args_hash,
    redis_client,
)
from core.migrate import scratch_schema

REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WARMUP = 200
REPLAY_TARGET, FIRST_TARGET, THROUGHPUT_TARGET = 1.3, 2.5, 1.5
LEASE_MS, TTL_S = 30_000, 3600
RESULT = json.dumps({"result": {"order_id": "ORD-1", "amount": 2}, "error": None,
                     "fence": None, "attempts": 1}, separators=(",", ":"))


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


@dataclass
class Figure:
    """Latencies (µs) of one operation measured in a single client loop, and its throughput."""

    name: str
    latencies_us: list[float]
    seconds: float

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_us)

    @property
    def p99(self) -> float:
        ordered = sorted(self.latencies_us)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]

    @property
    def per_s(self) -> float:
        return len(self.latencies_us) / self.seconds


def measure(ops: dict[str, Callable[[int], Any]], n: int, rounds: int,
            deadline: float) -> dict[str, Figure]:
    """Time each ``op(i)`` for i in 0..n-1, the contenders interleaved in ``rounds`` slices so
    that load from elsewhere on the machine falls on all of them alike. Dict order matters: a
    replay slice runs after the first-arrival slice that created its keys."""
    for i in range(-WARMUP, 0):
        for op in ops.values():
            op(i)
    latencies: dict[str, list[float]] = {name: [] for name in ops}
    seconds = dict.fromkeys(ops, 0.0)
    per_round = max(1, n // rounds)
    for r in range(rounds):
        for name, op in ops.items():
            started = time.perf_counter()
            for i in range(r * per_round, (r + 1) * per_round):
                t0 = time.perf_counter_ns()
                op(i)
                latencies[name].append((time.perf_counter_ns() - t0) / 1000)
            seconds[name] += time.perf_counter() - started
        if time.monotonic() > deadline:
            say(f"time limit reached after {(r + 1) * per_round} requests per path")
            break
    figures = {name: Figure(name, latencies[name], seconds[name]) for name in ops}
    for f in figures.values():
        say(f"{f.name:<28} p50 {f.p50:8.1f} µs  p99 {f.p99:8.1f} µs  {f.per_s:9.0f}/s")
    return figures


def threaded_rate(op: Callable[[int], Any], n: int, threads: int) -> float:
    """Aggregate operations per second of ``threads`` client loops sharing one client pool."""
    per_thread = max(1, n // threads)

    def loop(t: int) -> None:
        for i in range(per_thread):
            op(t * per_thread + i)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(loop, range(threads)))
    return per_thread * threads / (time.perf_counter() - started)


# -- the three contenders --------------------------------------------------------------------


class Naive:
    """The seed-style gateway, three round trips per call: INCR fence; SET NX; SET or GET result."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.r, self.p = client, prefix

    def first(self, i: int) -> Any:
        self.r.incr(f"{self.p}fence:s{i % 64}")
        if not self.r.set(f"{self.p}seen:{i}", 1, nx=True, ex=TTL_S):
            raise RuntimeError("naive first arrival found its key")
        return self.r.set(f"{self.p}result:{i}", RESULT, ex=TTL_S)

    def replay(self, i: int) -> Any:
        self.r.incr(f"{self.p}fence:s{i % 64}")
        if self.r.set(f"{self.p}seen:{i}", 1, nx=True, ex=TTL_S):
            raise RuntimeError("naive replay claimed a fresh key")
        return self.r.get(f"{self.p}result:{i}")


class StorePath:
    """Ours, Redis only: claim_or_replay then complete (first), claim_or_replay (replay)."""

    ARGS_HASH = args_hash({"user": "U1", "order_ref": "ORD-1", "amount": 2})

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.store = RedisClaimStore(client, prefix)

    def first(self, i: int) -> Any:
        owner = uuid.uuid4().hex
        claim = self.store.claim_or_replay(f"k{i}", self.ARGS_HASH, owner, LEASE_MS)
        if claim.outcome != "claimed":
            raise RuntimeError(f"first arrival answered {claim.outcome}")
        return self.store.complete(f"k{i}", owner, RESULT, TTL_S)

    def replay(self, i: int) -> Any:
        claim = self.store.claim_or_replay(f"k{i}", self.ARGS_HASH, uuid.uuid4().hex, LEASE_MS)
        if claim.outcome != "replay":
            raise RuntimeError(f"replay answered {claim.outcome}")
        return claim.result


class FullPath:
    """Ours, the whole ``Gateway.run``: Redis fast path in front of the ledger on PostgreSQL."""

    def __init__(self, client: redis.Redis, prefix: str, engine: Engine) -> None:
        self.gateway = Gateway(Ledger(engine), RedisClaimStore(client, prefix))

    @staticmethod
    def call(i: int) -> ToolCall:
        return ToolCall("create_order", {"user": "U1", "order_ref": f"ORD-{i}", "amount": 2},
                        actor="bench", session_id=f"case-{i % 64}", business_key=f"U1:ORD-{i}")

    @staticmethod
    def executor(args: Any) -> dict[str, Any]:
        return {"order_id": args["order_ref"], "amount": args["amount"]}

    def first(self, i: int) -> Any:
        answer = self.gateway.run(self.call(i), self.executor)
        if answer.status is not CallStatus.OK:
            raise RuntimeError(f"first arrival answered {answer.status}")
        return answer

    def replay(self, i: int) -> Any:
        answer = self.gateway.run(self.call(i), self.executor)
        if answer.status is not CallStatus.REPLAYED:
            raise RuntimeError(f"replay answered {answer.status}")
        return answer


# -- set-up ------------------------------------------------------------------------------------


def drop_keys(client: redis.Redis, prefix: str) -> None:
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start:start + 1000])


# -- the run -----------------------------------------------------------------------------------


def ratios(ping: Figure, first: Figure, replay: Figure, naive_first: Figure,
           naive_replay: Figure) -> dict[str, Any]:
    figures = {
        "replay_over_ping": round(replay.p50 / ping.p50, 3),
        "first_over_ping": round(first.p50 / ping.p50, 3),
        "throughput_vs_naive_first": round(first.per_s / naive_first.per_s, 3),
        "throughput_vs_naive_replay": round(replay.per_s / naive_replay.per_s, 3),
    }
    figures |= {
        "replay_target_met": figures["replay_over_ping"] <= REPLAY_TARGET,
        "first_target_met": figures["first_over_ping"] <= FIRST_TARGET,
        "throughput_first_target_met": figures["throughput_vs_naive_first"] >= THROUGHPUT_TARGET,
        "throughput_replay_target_met":
            figures["throughput_vs_naive_replay"] >= THROUGHPUT_TARGET,
    }
    return figures


def run(args: argparse.Namespace) -> dict[str, Any]:
    deadline = time.monotonic() + args.time_limit_s
    client = redis_client(args.redis_url)  # the gateway's own client settings, for all three
    prefix = f"bench:gw:{uuid.uuid4().hex[:8]}:"
    n = args.requests
    try:
        naive = Naive(client, prefix + "naive:")
        store = StorePath(client, prefix + "store:")
        figures = measure({"PING": lambda _i: client.ping(),
                           "naive first (3 RTT)": naive.first,
                           "naive replay (3 RTT)": naive.replay,
                           "ours store first (2 RTT)": store.first,
                           "ours store replay (1 RTT)": store.replay},
                          n, args.rounds, deadline)
        ping, naive_first, naive_replay, first, replay = figures.values()
        result: dict[str, Any] = {
            "requests": n,
            "ping_p50_us": round(ping.p50, 1), "ping_p99_us": round(ping.p99, 1),
            "first_p50_us": round(first.p50, 1), "first_p99_us": round(first.p99, 1),
            "replay_p50_us": round(replay.p50, 1), "replay_p99_us": round(replay.p99, 1),
            "naive_first_p50_us": round(naive_first.p50, 1),
            "naive_first_p99_us": round(naive_first.p99, 1),
            "naive_replay_p50_us": round(naive_replay.p50, 1),
            "naive_replay_p99_us": round(naive_replay.p99, 1),
            "ping_per_s": round(ping.per_s), "first_per_s": round(first.per_s),
            "replay_per_s": round(replay.per_s), "naive_first_per_s": round(naive_first.per_s),
            "naive_replay_per_s": round(naive_replay.per_s),
            "measured_path": "redis_store",
        } | ratios(ping, first, replay, naive_first, naive_replay)
        if args.full:
            with scratch_schema(args.postgres_url) as engine:
                full = FullPath(client, prefix + "full:", engine)
                full_first, full_replay = measure(
                    {"ours full first (+ledger)": full.first, "ours full replay": full.replay},
                    min(n, args.full_requests), args.rounds, deadline).values()
            full_figures = ratios(ping, full_first, full_replay, naive_first, naive_replay)
            result |= {"full_first_p50_us": round(full_first.p50, 1),
                       "full_first_p99_us": round(full_first.p99, 1),
                       "full_replay_p50_us": round(full_replay.p50, 1),
                       "full_replay_p99_us": round(full_replay.p99, 1),
                       "full_first_per_s": round(full_first.per_s),
                       "full_replay_per_s": round(full_replay.per_s)}
            result |= {f"full_{key}": value for key, value in full_figures.items()}
        if args.threads > 1:
            drop_keys(client, prefix)
            threaded = {
                "naive_first": threaded_rate(Naive(client, prefix + "tn:").first, n, args.threads),
                "store_first": threaded_rate(StorePath(client, prefix + "ts:").first, n,
                                             args.threads),
            }
            say(f"{args.threads} threads: naive first {threaded['naive_first']:.0f}/s, "
                f"ours store first {threaded['store_first']:.0f}/s")
            result |= {"threads": args.threads,
                       "threaded_naive_first_per_s": round(threaded["naive_first"]),
                       "threaded_first_per_s": round(threaded["store_first"]),
                       "threaded_throughput_vs_naive_first":
                           round(threaded["store_first"] / threaded["naive_first"], 3)}
        return result
    finally:
        drop_keys(client, prefix)
        client.close()


def print_table(result: dict[str, Any]) -> None:
    rows = [("PING", "ping"), ("naive first (INCR; SET NX; SET)", "naive_first"),
            ("naive replay (INCR; SET NX; GET)", "naive_replay"),
            ("ours, Redis store: first", "first"), ("ours, Redis store: replay", "replay")]
    if "full_first_p50_us" in result:
        rows += [("ours, full Gateway.run: first", "full_first"),
                 ("ours, full Gateway.run: replay", "full_replay")]
    print(f"{'path':<36} {'p50 µs':>9} {'p99 µs':>9} {'ops/s':>9}")
    for label, key in rows:
        p99 = result.get(f"{key}_p99_us", "")
        print(f"{label:<36} {result[f'{key}_p50_us']:>9} {p99!s:>9} {result[f'{key}_per_s']:>9}")


SHORT: dict[str, Any] = {"requests": 200, "full_requests": 50, "rounds": 1, "threads": 2}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000, help="requests per measured path")
    parser.add_argument("--full-requests", type=int, default=2000,
                        help="requests for the full Gateway.run path (each first arrival "
                             "writes ledger rows)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="interleave the contenders in this many slices")
    parser.add_argument("--no-full", dest="full", action="store_false",
                        help="skip the full Gateway.run path (no PostgreSQL needed)")
    parser.add_argument("--threads", type=int, default=4,
                        help="also measure first-arrival throughput with this many threads "
                             "(1 to skip)")
    parser.add_argument("--time-limit-s", type=float, default=120.0,
                        help="stop measuring when this much time has passed")
    parser.add_argument("--redis-url", default=REDIS_URL)
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--short", action="store_true",
                        help=f"seconds and small sizes: {SHORT}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    for url in (args.redis_url, args.postgres_url):
        if "127.0.0.1" not in url and "localhost" not in url:
            parser.error(f"benchmarks only target this machine: {url}")
    result = run(args)
    print_table(result)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
