"""Benchmark: the librarian's full-text recall beside a plain ``LIKE '%…%'`` scan, in one run on
127.0.0.1.

Indexes N chunks (default 10,000: 1,000 runbook-like documents of 10 sections, ~1 KB each, words
drawn from a Zipf-distributed vocabulary of SRE words and made-up service names) through
``Library.index``, then answers the same case-title-like queries (4 to 6 words, any word of the
vocabulary, so some are frequent: the p99 is theirs) with the ranked
full-text search (PostgreSQL tsvector + GIN and ``ts_rank``; SQLite FTS5 and ``bm25``) and with
``lower(body) LIKE '%word%'`` for any word, on the same connection. Targets (issue 9): query
p99 < 50 ms and at least 10x faster than the scan. Figures last, as one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, text

from core.db.database import make_engine
from core.library import Document, Library
from core.library.search import like_scan, search
from core.migrate import scratch_schema, upgrade_engine

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
P99_TARGET_MS, SPEEDUP_TARGET = 50.0, 10.0
SRE_TEXT = """
latency error timeout deploy release rollback canary restart pod node memory leak cpu disk
queue lag consumer producer kafka redis postgres replica primary failover region traffic
gateway certificate dns resolver cache eviction saturation throttling oom crash loop probe
health readiness liveness ingress egress load balancer connection pool exhausted deadlock
index vacuum replication slot wal archive backup restore snapshot volume filesystem inode
quota limit burst spike regression alert page incident escalation runbook dashboard metric
trace span log retention rotation compression shard partition rebalance leader election
quorum heartbeat session token expiry rate limiter retry backoff circuit breaker fallback
feature flag config drift secret rotation permission denied bucket object storage upload
"""
SRE_WORDS = SRE_TEXT.split()
SYLLABLES = ("ka", "ro", "mi", "tu", "ve", "la", "shi", "no", "pa", "ze", "qu", "bo", "ri", "da",
             "fe", "lu", "xo", "ne", "ti", "gar", "vel", "mon", "dor")


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    """SRE words and made-up service and host names, shuffled: which words are frequent is a
    matter of chance, as it is in a real runbook folder."""
    words = list(SRE_WORDS)
    while len(words) < size:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in words:
            words.append(word)
    rng.shuffle(words)
    return words


class Corpus:
    """Zipf-distributed words: a few very common, a long tail of rare ones."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        self.weights = [1 / (rank + 1) for rank in range(len(self.words))]

    def text(self, count: int) -> str:
        return " ".join(self.rng.choices(self.words, self.weights, k=count))

    def documents(self, chunks: int, per_doc: int = 10) -> list[Document]:
        return [Document(f"bench:{n}", "runbook", self.text(6),
                         [self.text(150) for _ in range(per_doc)], {"path": f"bench/{n}.md"})
                for n in range(chunks // per_doc)]

    def queries(self, count: int) -> list[str]:
        """Case-title-like: 4-6 words of the vocabulary, frequent and rare alike."""
        return [" ".join(self.rng.sample(self.words, self.rng.randint(4, 6)))
                for _ in range(count)]


def timed(conn: Connection, run: Callable[[Connection, str], Any],
          queries: list[str]) -> list[float]:
    times = []
    for query in queries:
        started = time.perf_counter()
        run(conn, query)
        times.append((time.perf_counter() - started) * 1000)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(engine: Engine, label: str, chunks: int, queries: int, seed: int) -> dict[str, Any]:
    corpus = Corpus(seed)
    documents = corpus.documents(chunks)
    library = Library(engine)
    started = time.perf_counter()
    for document in documents:
        library.index(document)
    index_s = time.perf_counter() - started
    say(f"{label}: indexed {chunks} chunks in {index_s:.1f} s")
    with engine.begin() as conn:
        # What autovacuum does after a bulk load: the planner's row counts, and on PostgreSQL
        # the lexeme frequencies the search uses to tell common words from telling ones.
        conn.execute(text("ANALYZE"))
    asked = corpus.queries(queries)
    with engine.connect() as conn:
        timed(conn, lambda c, q: search(c, q, "runbook", 3), asked[:20])  # warm the caches
        fts = timed(conn, lambda c, q: search(c, q, "runbook", 3), asked)
        scan = timed(conn, lambda c, q: like_scan(c, q, "runbook", 3), asked)
    figures = {
        "chunks": chunks, "queries": queries, "index_s": round(index_s, 2),
        "index_chunks_per_s": round(chunks / index_s),
        "query_p50_ms": round(statistics.median(fts), 2),
        "query_p99_ms": round(percentile(fts, 0.99), 2),
        "like_p50_ms": round(statistics.median(scan), 2),
        "like_p99_ms": round(percentile(scan, 0.99), 2),
    }
    figures["speedup_p50"] = round(figures["like_p50_ms"] / max(figures["query_p50_ms"], 1e-3), 1)
    figures["speedup_p99"] = round(figures["like_p99_ms"] / max(figures["query_p99_ms"], 1e-3), 1)
    figures["target_met"] = (figures["query_p99_ms"] < P99_TARGET_MS
                             and figures["speedup_p50"] >= SPEEDUP_TARGET)
    return figures


def table(results: dict[str, dict[str, Any]]) -> None:
    print(f"{'database':<10} {'index s':>8} {'fts p50':>8} {'fts p99':>8} {'like p50':>9} "
          f"{'like p99':>9} {'x p50':>6}")
    for name, r in results.items():
        print(f"{name:<10} {r['index_s']:>8} {r['query_p50_ms']:>8} {r['query_p99_ms']:>8} "
              f"{r['like_p50_ms']:>9} {r['like_p99_ms']:>9} {r['speedup_p50']:>6}")


SHORT: dict[str, Any] = {"chunks": 500, "queries": 20}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--databases", default="postgres,sqlite",
                        help="comma-separated: postgres, sqlite")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--short", action="store_true",
                        help=f"seconds and small sizes: {SHORT}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    if not 100 <= args.chunks <= 200_000 or not 10 <= args.queries <= 10_000:
        parser.error("--chunks must be 100..200000 and --queries 10..10000")
    results: dict[str, dict[str, Any]] = {}
    for name in args.databases.split(","):
        if name == "postgres":
            with scratch_schema(args.postgres_url, prefix="bench") as engine:
                results[name] = measure(engine, name, args.chunks, args.queries, args.seed)
        elif name == "sqlite":
            with tempfile.TemporaryDirectory() as folder:
                engine = make_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
                upgrade_engine(engine)
                results[name] = measure(engine, name, args.chunks, args.queries, args.seed)
                engine.dispose()
        else:
            parser.error(f"unknown database {name!r}")
    table(results)
    summary = {**results, "p99_target_ms": P99_TARGET_MS, "speedup_target": SPEEDUP_TARGET,
               "targets_met": all(r["target_met"] for r in results.values())}
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
