"""The pgvector peer is the real thing: PostgreSQL 18 with the pgvector 0.8 extension (not the
machine's PostgreSQL 15, not a fake), computing cosine distances and answering a nearest-neighbour
query through an HNSW index; each test's migrated schema sees its own tables and ``public``'s
``vector`` type, never another test's tables."""

from __future__ import annotations

from sqlalchemy import Engine, text

from core.migrate import current_revision, head_revision, scratch_schema

ITEMS = {1: "[1,0,0]", 2: "[0.9,0.1,0]", 3: "[0,1,0]", 4: "[0,0,1]", 5: "[0.5,0.5,0.5]"}


def test_the_peer_is_postgresql_18_with_pgvector_0_8(pgvector_engine: Engine) -> None:
    with pgvector_engine.connect() as conn:
        version = conn.execute(text(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar_one()
        server = conn.execute(text("SHOW server_version_num")).scalar_one()
        home = conn.execute(text(
            "SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE t.typname = 'vector'")).scalar_one()
    assert version.startswith("0.8."), version
    assert int(server) >= 180000, server
    assert home == "public"


def test_cosine_distance_is_computed_by_the_extension(pgvector_engine: Engine) -> None:
    with pgvector_engine.connect() as conn:
        distance = conn.execute(text(
            "SELECT '[1,0]'::vector <=> '[0.6,0.8]'::vector")).scalar_one()
    assert abs(distance - 0.4) < 1e-6, distance


def test_a_nearest_neighbour_query_uses_the_hnsw_index(pgvector_engine: Engine) -> None:
    query = "SELECT id FROM items ORDER BY embedding <=> '[1,0,0]' LIMIT 2"
    with pgvector_engine.begin() as conn:
        conn.execute(text("CREATE TABLE items (id int PRIMARY KEY, embedding vector(3))"))
        conn.execute(text("INSERT INTO items VALUES (:id, CAST(:embedding AS vector))"),
                     [{"id": id_, "embedding": vec} for id_, vec in ITEMS.items()])
        conn.execute(text(
            "CREATE INDEX items_embedding_hnsw ON items USING hnsw (embedding vector_cosine_ops)"))
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(conn.execute(text(f"EXPLAIN {query}")).scalars())
        nearest = list(conn.execute(text(query)).scalars())
    assert "Index Scan using items_embedding_hnsw on items" in plan, plan
    assert nearest == [1, 2]


def test_each_test_schema_is_migrated_and_sees_only_its_own_tables(
        pgvector_engine: Engine, pgvector_server: str) -> None:
    with pgvector_engine.begin() as conn:
        conn.execute(text("CREATE TABLE only_mine (embedding vector(2))"))
        mine = conn.execute(text("SELECT current_schema()")).scalar_one()
    assert current_revision(pgvector_engine) == head_revision()
    with scratch_schema(pgvector_server, prefix="t", search_path_after="public") as other, \
            other.connect() as conn:
        theirs = conn.execute(text("SELECT current_schema()")).scalar_one()
        seen = conn.execute(text("SELECT to_regclass('only_mine')")).scalar_one()
        in_public = conn.execute(text(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")).scalar_one()
        vector_type = conn.execute(text("SELECT pg_typeof('[1,2]'::vector)::text")).scalar_one()
        assert current_revision(other) == head_revision()
    assert theirs != mine
    assert seen is None
    assert in_public == 0  # the migrations went into the schemas, not into public
    assert vector_type == "vector"
