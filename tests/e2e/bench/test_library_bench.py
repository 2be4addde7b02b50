"""The librarian's recall bench (issue 30) runs at a small size with no server given (it starts
its own PostgreSQL with pgvector), prints its figures as one JSON line last, and the hybrid
ranking recalls at least as well as full-text on both databases. Its labelled set keeps its
promises: enough queries of every kind, labels that name real documents, and paraphrases that
share no word with the document they should find."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from bench.library import case_document as bench_case_document
from core.analysis.catalog import title_words
from core.db.database import connection
from core.library.library import case_document
from core.library.search import STOPWORDS
from tests.e2e.bench.test_benches_start import ROOT, last_json_line
from tests.support.apps import make_app
from tests.support.library import PAST, closed_case

SET = ROOT / "bench" / "library_set.json"
RUNBOOKS = ROOT / "docs" / "runbooks"
CATEGORIES = ("paraphrase", "vague", "misleading", "chinese")
RANKINGS = ("fulltext", "vector", "hybrid")
LATENCY = ("fulltext_p50_ms", "fulltext_p99_ms", "vector_p50_ratio", "vector_p99_ratio",
           "hybrid_p50_ratio", "hybrid_p99_ratio", "vector_exact_p99_ratio", "embed_p99_ratio",
           "index_s", "embed_s", "hnsw_overlap_vs_exact")


def assert_scores(scores: dict[str, Any]) -> None:
    assert set(scores) == {"recall_at_3", "mrr"}
    assert all(0 <= value <= 1 for value in scores.values()), scores


def test_the_library_bench_runs_small_and_hybrid_recalls_at_least_as_well_as_words() -> None:
    figures = last_json_line("library", ["--short"])
    assert figures["set"]["queries"] >= 60 and figures["set"]["chinese"] >= 10
    assert figures["model"] == "wordllama-l2-256"
    for database in ("sqlite", "postgres"):
        result = figures[database]
        for ranking in RANKINGS:
            assert_scores(result[ranking])
            for category in CATEGORIES:
                assert_scores(result["by_group"][category][ranking])
        assert result["hybrid"]["recall_at_3"] >= result["fulltext"]["recall_at_3"], result
        assert result["gain_points"] == pytest.approx(
            100 * (result["hybrid"]["recall_at_3"] - result["fulltext"]["recall_at_3"]), abs=0.1)
    latency = figures["postgres"]["latency"]
    assert latency["cases"] == 300 and latency["queries"] == 20
    assert all(latency[name] > 0 for name in LATENCY), latency
    assert isinstance(latency["hnsw_used"], bool) and figures["hnsw_used"] is latency["hnsw_used"]
    assert_scores(latency["at_scale"]["vector_exact"])
    assert figures["target_met"] is all(
        figures[db]["gain_points"] >= figures["target_points"] for db in ("sqlite", "postgres"))


def words(text: str) -> set[str]:
    """A text's search words, compared by their first five letters (a crude stem)."""
    return {word[:5] for word in title_words(text) if word not in STOPWORDS and len(word) > 1}


def documents() -> dict[str, str]:
    data = json.loads(SET.read_text("utf-8"))
    texts = {f"case:{case['id']}": " ".join([case["title"], *case["findings"], "resolved by",
                                             case["resolved_by"], *case["steps"], "verified",
                                             case["verification"]])
             for case in data["cases"]}
    texts.update({f"runbook:{path.name}": path.read_text("utf-8")
                  for path in RUNBOOKS.glob("*.md")})
    return texts


def test_the_labelled_set_keeps_its_promises() -> None:
    assert SET.stat().st_size < 200_000
    queries = json.loads(SET.read_text("utf-8"))["queries"]
    texts = documents()
    assert len(queries) >= 60
    counts = {category: sum(q["category"] == category for q in queries)
              for category in CATEGORIES}
    assert counts["chinese"] >= 10 and min(counts.values()) >= 10, counts
    assert len({q["query"] for q in queries}) == len(queries)
    for query in queries:
        assert query["category"] in CATEGORIES, query
        assert query["expected"] and set(query["expected"]) <= set(texts), query
        assert len({source.split(":")[0] for source in query["expected"]}) == 1, query
    shared = {q["query"]: words(q["query"]) & words(texts[source])
              for q in queries if q["category"] == "paraphrase" for source in q["expected"]}
    assert {query: found for query, found in shared.items() if found} == {}


def test_a_paraphrase_sharing_a_word_would_be_noticed() -> None:
    """The check above is not vacuous: "resolved by", in every case, is a shared word."""
    assert words("who resolved it") & words(documents()["case:pay-gw-timeout"]) == {"resol"}


def test_the_bench_writes_a_past_case_as_the_librarian_does(sqlite_engine: Engine) -> None:
    """The set's cases are indexed as ``case_document`` makes a closed case: same title, same
    lines (finding, resolved by, verified), so the bench measures what the product indexes."""
    title, plan, finding, verification = PAST[0]
    app = make_app(sqlite_engine)
    try:
        with connection(sqlite_engine) as conn:
            made = case_document(conn, closed_case(app, title, plan, finding, verification))
    finally:
        app.close()
    written = bench_case_document({
        "id": "any", "title": title, "findings": [finding], "resolved_by": plan,
        "steps": ["noop"], "verification": verification})
    assert made is not None
    assert (written.kind, written.title, written.chunks) == (made.kind, made.title, made.chunks)
    assert written.passages == made.passages


def test_every_shipped_runbook_has_queries_in_the_set() -> None:
    named = {source.split(":", 1)[1] for q in json.loads(SET.read_text("utf-8"))["queries"]
             for source in q["expected"] if source.startswith("runbook:")}
    assert named == {path.name for path in Path(RUNBOOKS).glob("*.md")}
