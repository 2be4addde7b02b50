"""The librarian recalls by meaning: vectors in sqlite-vec (SQLite) and pgvector (a real
PostgreSQL with the real extension, tests/support/pgvector.py), ranked with full-text search by
reciprocal rank fusion; a PostgreSQL without pgvector keeps recalling by words and says why;
vectors of another model are never compared, and ``reindex`` replaces them."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import Engine, text

from core.db.database import connection
from core.errors import Unavailable
from core.library import Document, Library
from core.library.embeddings import EmbeddedModel, EndpointModel
from core.library.vectors import NO_PGVECTOR, _pg_nearest, missing_store, nearest, stored_models
from tests.support.openai_stub import embeddings_stub

PAST = {
    "payments": "payment gateway timeouts, card charges failing",
    "orders": "database connection pool exhausted on the orders service",
    "search": "disk full on the log volume of the search cluster",
    "ingress": "TLS certificate expired on the public API ingress",
    "cart": "memory leak: cart pods OOMKilled after the 3.2 release",
    "dns": "name resolution failures from kube-dns in eu-west",
}
NEW_CASE = "checkout can't take money since 10:05"  # no word in common with "payments"


def index_past_cases(library: Library) -> None:
    for name, title in PAST.items():
        body = f"{title}\nresolved by: the plan for {name}\nverified: error ratio below 1%"
        library.index(Document(f"case:{name}", "case", title, [body], {"case_id": name}))


@pytest.fixture(params=["sqlite", "pgvector"])
def vector_engine(request: pytest.FixtureRequest) -> Engine:
    """SQLite with sqlite-vec, and PostgreSQL with pgvector."""
    return request.getfixturevalue("sqlite_engine" if request.param == "sqlite"
                                   else "pgvector_engine")


def test_meaning_finds_the_past_case_words_alone_miss(vector_engine: Engine) -> None:
    index_past_cases(Library(vector_engine, EmbeddedModel()))
    by_words = Library(vector_engine, None)
    assert by_words.similar_cases(NEW_CASE) == []
    found = Library(vector_engine, EmbeddedModel()).similar_cases(NEW_CASE)
    assert found[0]["case_id"] == "payments"
    assert found[0]["similarity"] > 0.2


def test_a_case_found_both_ways_ranks_above_one_found_either_way(vector_engine: Engine) -> None:
    library = Library(vector_engine, EmbeddedModel())
    index_past_cases(library)
    found = library.similar_cases("cart service pods keep getting OOMKilled", limit=3)
    assert found[0]["case_id"] == "cart"
    assert found[0]["similarity"] is not None


def test_each_passage_is_stored_with_its_model_and_dimension(vector_engine: Engine) -> None:
    index_past_cases(Library(vector_engine, EmbeddedModel()))
    with connection(vector_engine) as conn:
        assert stored_models(conn) == [("wordllama-l2-256", 256)]
        rows = conn.execute(text("SELECT count(*) FROM kb_vector")).scalar_one()
    assert rows == 2 * len(PAST)  # the title, and the whole case


def test_pgvector_answers_from_the_hnsw_index(pgvector_engine: Engine) -> None:
    library = Library(pgvector_engine, EmbeddedModel())
    index_past_cases(library)
    vector = EmbeddedModel().embed([NEW_CASE])[0]
    with pgvector_engine.connect() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        conn.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        found = nearest(conn, vector, "wordllama-l2-256", "case", 3)
        plan = conn.execute(text("EXPLAIN " + _pg_nearest("case", 256, 12)),
                            {"q": "[" + ",".join(map(str, vector)) + "]",
                             "model": "wordllama-l2-256", "limit": 3}).scalars().all()
    assert found[0].doc_id and found[0].similarity > 0.2
    assert any("ix_kb_vector_case_256" in line for line in plan), plan


def test_a_postgresql_without_pgvector_recalls_by_words_and_says_why(pg_engine: Engine) -> None:
    library = Library(pg_engine, EmbeddedModel())
    index_past_cases(library)  # no vector store: the text is indexed all the same
    with connection(pg_engine) as conn:
        assert missing_store(conn) == NO_PGVECTOR
    assert library.meaning.problem() == NO_PGVECTOR
    assert library.similar_cases("payment gateway timeouts")[0]["case_id"] == "payments"
    assert library.similar_cases(NEW_CASE) == []
    with pytest.raises(Unavailable, match="pgvector is not installed"):
        library.meaning.reindex()


class Scaled:
    """Another model: the embedded one's vectors, turned (the same meaning, other numbers)."""

    def __init__(self, model: str) -> None:
        self.model = model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [vector[::-1] for vector in EmbeddedModel().embed(texts)]


def test_vectors_of_another_model_are_refused_until_reindexed(vector_engine: Engine) -> None:
    index_past_cases(Library(vector_engine, EmbeddedModel()))
    other = Library(vector_engine, Scaled("other-model"))
    problem = other.meaning.problem()
    assert problem == ("the library's vectors were made by wordllama-l2-256 (256 dimensions), "
                       "not OPSGATE_EMBEDDINGS_MODEL=other-model: recall is by words only "
                       "until `opsgate library reindex`")
    assert other.similar_cases(NEW_CASE) == []  # no vector of the other model is compared
    other.index(Document("case:new", "case", "queue backlog", ["queue backlog"], {}))
    with connection(vector_engine) as conn:
        assert stored_models(conn) == [("wordllama-l2-256", 256)]  # nothing mixed in
    seen: list[tuple[int, int]] = []
    done = Library(vector_engine, Scaled("other-model")).meaning.reindex(
        lambda n, total: seen.append((n, total)), batch=3)
    # each past case has two passages; "queue backlog" one (its only chunk is its title)
    assert (done.documents, done.passages, done.model) == (7, 13, "other-model")
    assert seen == [(3, 7), (6, 7), (7, 7)]
    again = Library(vector_engine, Scaled("other-model"))
    assert again.meaning.problem() is None
    assert again.similar_cases(NEW_CASE)[0]["case_id"] == "payments"


def test_an_endpoint_model_is_asked_once_per_batch_and_normalized(sqlite_engine: Engine) -> None:
    with embeddings_stub(EmbeddedModel().embed) as (stub, server):
        model = EndpointModel("stub-embed", base_url=f"{server.base}/v1", api_key="k",
                              timeout_s=5, max_retries=0)
        library = Library(sqlite_engine, model)
        index_past_cases(library)
        found = library.similar_cases(NEW_CASE)
        vector = model.embed(["payment"])[0]
    assert found[0]["case_id"] == "payments"
    assert abs(sum(x * x for x in vector) - 1.0) < 1e-6
    assert stub.requests[0]["model"] == "stub-embed"
    assert len(stub.requests) == len(PAST) + 2  # one per document, one per query


def test_an_endpoint_that_fails_leaves_recall_by_words(sqlite_engine: Engine) -> None:
    with embeddings_stub(EmbeddedModel().embed) as (stub, server):
        stub.failing = True
        model = EndpointModel("stub-embed", base_url=f"{server.base}/v1", api_key="k",
                              timeout_s=5, max_retries=1)
        library = Library(sqlite_engine, model)
        index_past_cases(library)  # the text is indexed: nothing is lost
        assert library.similar_cases("payment gateway timeouts")[0]["case_id"] == "payments"
        with pytest.raises(Unavailable, match="embeddings endpoint"):
            model.embed(["x"])
    with connection(sqlite_engine) as conn:
        assert conn.execute(text("SELECT count(*) FROM kb_vector")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM kb_doc")).scalar_one() == len(PAST)


def test_the_hnsw_search_is_widened_but_never_narrowed(pgvector_engine: Engine) -> None:
    index_past_cases(Library(pgvector_engine, EmbeddedModel()))
    vector = EmbeddedModel().embed([NEW_CASE])[0]
    width = text("SELECT current_setting('hnsw.ef_search')")
    for operators, expected in ((None, "200"), ("1000", "1000")):
        with pgvector_engine.connect() as conn:
            if operators:
                conn.execute(text(f"SET hnsw.ef_search = {operators}"))
            assert nearest(conn, vector, "wordllama-l2-256", "case", 3)
            assert conn.execute(width).scalar_one() == expected


def test_a_running_process_sees_a_reindex_made_by_another(vector_engine: Engine,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from core.library import meaning

    index_past_cases(Library(vector_engine, EmbeddedModel()))
    running = Library(vector_engine, Scaled("other-model"))
    assert running.meaning.problem() is not None
    Library(vector_engine, Scaled("other-model")).meaning.reindex()  # `opsgate library reindex`
    assert running.meaning.problem() is not None  # looked at a moment ago: not yet again
    monkeypatch.setattr(meaning, "LOOK_AGAIN_S", 0.0)
    assert running.meaning.problem() is None
    assert running.similar_cases(NEW_CASE)[0]["case_id"] == "payments"
