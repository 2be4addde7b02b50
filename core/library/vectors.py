"""The librarian's vectors, where the data lives: ``kb_vector`` holds one vector per passage of a
document (a case's title, findings and resolution; a runbook's sections), with the model that
made it and its dimension. PostgreSQL: pgvector's ``vector`` column and an HNSW index (cosine) per
kind and dimension; SQLite: a BLOB of float32s compared by sqlite-vec's ``vec_distance_cosine``.

Like the full-text columns, the table is the database's own (not declared in SQLAlchemy's
metadata): ``create_store`` makes it, from migration 0017 and again from ``opsgate library
reindex`` (pgvector enabled after the upgrade). A database that cannot hold vectors (no pgvector,
an SQLite without sqlite-vec) still serves, by words: ``missing_store`` says why in one line.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

HNSW_MAX_DIMENSION = 2000  # pgvector indexes ``vector`` columns up to this many dimensions
KINDS = ("case", "runbook")
INDEXED_KINDS = ("case",)  # runbooks are tens of rows: an exact scan is as fast and exact
DEFAULT_DIMENSION = 256  # the embedded model's (core.settings.evidence.EMBEDDED_MODEL)

_TABLE = """
CREATE TABLE IF NOT EXISTS kb_vector (
    doc_id {id} NOT NULL REFERENCES kb_doc(id) ON DELETE CASCADE,
    passage integer NOT NULL,
    kind varchar(16) NOT NULL,
    model varchar(200) NOT NULL,
    dimension integer NOT NULL,
    embedding {vector} NOT NULL,
    PRIMARY KEY (doc_id, passage)
)"""
_PG_TABLE = _TABLE.format(id="bigint", vector="vector")
_SQLITE_TABLE = _TABLE.format(id="INTEGER", vector="BLOB")
NO_PGVECTOR = ("pgvector is not installed in this PostgreSQL: the librarian recalls by words "
               "only (full-text search); enable the extension, then run `opsgate library "
               "reindex` (docs/evidence.md)")
NO_LOADABLE_SQLITE = ("this Python's sqlite3 cannot load extensions (it was built without "
                      "--enable-loadable-sqlite-extensions, as pyenv builds are by default), so "
                      "sqlite-vec is not loaded: the librarian recalls by words only (full-text "
                      "search); for recall by meaning run opsgate on a Python that can, e.g. "
                      "Debian's python3 (README, \"Two commands\")")
NO_SQLITE_VEC = ("sqlite-vec did not load into SQLite: the librarian recalls by words only "
                 "(full-text search); reinstall opsgate (`make install`) and see the log's "
                 "'sqlite-vec not loaded' line")


def sqlite_can_load_extensions() -> bool:
    """Whether this interpreter's sqlite3 was built able to load extensions (sqlite-vec is one)."""
    return hasattr(sqlite3.Connection, "enable_load_extension")


@dataclass(frozen=True)
class Near:
    """A document and the cosine similarity of its passage closest to the query (1: same)."""

    doc_id: int
    similarity: float


def create_store(conn: Connection) -> str | None:
    """Make ``kb_vector`` (and the default dimension's HNSW index) when the database can hold
    vectors; else why not, in one line. PostgreSQL: pgvector is created when this role may."""
    if conn.dialect.name != "postgresql":
        conn.exec_driver_sql(_SQLITE_TABLE)
        return None
    if not _pgvector(conn):
        return NO_PGVECTOR
    conn.exec_driver_sql(_PG_TABLE)
    ensure_index(conn, DEFAULT_DIMENSION)
    return None


def _pgvector(conn: Connection) -> bool:
    """Whether the ``vector`` type resolves, creating the extension when it is available."""
    if conn.execute(text("SELECT to_regtype('vector') IS NOT NULL")).scalar_one():
        return True
    available = conn.execute(text(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
    if available is None:
        return False
    try:
        with conn.begin_nested():
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
    except DBAPIError:  # not allowed to: an administrator enables it (docs/evidence.md)
        return False
    return True


def ensure_index(conn: Connection, dimension: int) -> None:
    """An HNSW index (cosine) over the vectors of ``dimension`` of each indexed kind
    (PostgreSQL; a dimension pgvector cannot index is searched exactly)."""
    if conn.dialect.name != "postgresql" or not 0 < dimension <= HNSW_MAX_DIMENSION:
        return
    for kind in INDEXED_KINDS:
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS ix_kb_vector_{kind}_{int(dimension)} ON kb_vector "
            f"USING hnsw ((embedding::vector({int(dimension)})) vector_cosine_ops) "
            f"WHERE kind = '{kind}' AND dimension = {int(dimension)}")


def missing_store(conn: Connection,
                  can_load: Callable[[], bool] = sqlite_can_load_extensions) -> str | None:
    """Why this database holds no vectors, in one line; None when it does. On SQLite, whether
    this interpreter could load sqlite-vec at all (``can_load``) decides which line."""
    if conn.dialect.name == "postgresql":
        found = conn.execute(text("SELECT to_regclass('kb_vector') IS NOT NULL")).scalar_one()
        return None if found else NO_PGVECTOR
    try:
        conn.execute(text("SELECT vec_version()"))
    except DBAPIError:
        return NO_SQLITE_VEC if can_load() else NO_LOADABLE_SQLITE
    return None


def stored_models(conn: Connection) -> list[tuple[str, int]]:
    """The models (and their dimensions) the stored vectors were made by."""
    rows = conn.execute(text("SELECT DISTINCT model, dimension FROM kb_vector ORDER BY model"))
    return [(str(model), int(dimension)) for model, dimension in rows]


def drop_other_models(conn: Connection, model: str) -> None:
    """Forget the vectors any other model made (``opsgate library reindex``, at its end)."""
    conn.execute(text("DELETE FROM kb_vector WHERE model <> :model"), {"model": model})


def documents(conn: Connection) -> int:
    """How many documents the library holds."""
    return int(conn.execute(text("SELECT count(*) FROM kb_doc")).scalar_one())


def passages(conn: Connection) -> int:
    """How many passages have vectors (the store must exist)."""
    return int(conn.execute(text("SELECT count(*) FROM kb_vector")).scalar_one())


def store(conn: Connection, doc_id: int, kind: str, model: str,
          vectors: Sequence[Sequence[float]]) -> None:
    """Replace the vectors of document ``doc_id`` (one per passage, in order)."""
    conn.execute(text("DELETE FROM kb_vector WHERE doc_id = :doc_id"), {"doc_id": doc_id})
    if not vectors:
        return
    statement = _PG_INSERT if conn.dialect.name == "postgresql" else _SQLITE_INSERT
    rows = [{"doc_id": doc_id, "passage": n, "kind": kind, "model": model,
             "dimension": len(vector), "embedding": _literal(conn, vector)}
            for n, vector in enumerate(vectors)]
    conn.execute(statement, rows)


_INSERT = ("INSERT INTO kb_vector (doc_id, passage, kind, model, dimension, embedding) "
           "VALUES (:doc_id, :passage, :kind, :model, :dimension, {})")
_PG_INSERT = text(_INSERT.format("CAST(:embedding AS vector)"))
_SQLITE_INSERT = text(_INSERT.format(":embedding"))


def nearest(conn: Connection, vector: Sequence[float], model: str, kind: str,
            limit: int) -> list[Near]:
    """The ``kind`` documents whose passages lie nearest ``vector`` (made by ``model``), nearest
    first."""
    dimension = len(vector)
    params = {"kind": kind, "model": model, "q": _literal(conn, vector), "limit": limit}
    if conn.dialect.name == "postgresql":
        per_passage = limit * PASSAGES_PER_DOC
        # The index's search width: its default (40) returns at most 40 passages and, among
        # many look-alike cases, misses near ones an exact scan finds (docs/benchmarks.md). An
        # operator's wider setting (ALTER ROLE … SET hnsw.ef_search) is kept.
        conn.execute(_WIDEN, {"width": max(EF_SEARCH, per_passage)})
        statement = _pg_nearest(kind, dimension, per_passage=per_passage)
    else:
        statement = _SQLITE_NEAREST
        params["dimension"] = dimension
    rows = conn.execute(text(statement), params)
    return [Near(int(doc_id), round(1.0 - float(distance), 4)) for doc_id, distance in rows]


PASSAGES_PER_DOC = 4  # nearest passages read per document wanted (a case has two)
EF_SEARCH = 200  # HNSW candidates looked at per query, at least (pgvector's default is 40)
_WIDEN = text("SELECT set_config('hnsw.ef_search', greatest(coalesce(nullif(current_setting("
              "'hnsw.ef_search', true), '')::int, 40), :width)::text, true)")


def _pg_nearest(kind: str, dimension: int, per_passage: int) -> str:
    # The kind and dimension are written into the statement: the partial HNSW index's predicate
    # and expression must match the query's literally for the planner to use it (a prepared
    # statement's generic plan cannot prove a bound parameter implies it).
    if kind not in KINDS:
        raise ValueError(f"no such kind of document: {kind!r}")
    return _PG_NEAREST.format(kind=kind, dimension=int(dimension), per_passage=int(per_passage))


_PG_NEAREST = """
WITH passages AS (
    SELECT doc_id, embedding::vector({dimension}) <=> CAST(:q AS vector({dimension})) AS distance
    FROM kb_vector
    WHERE kind = '{kind}' AND dimension = {dimension} AND model = :model
    ORDER BY embedding::vector({dimension}) <=> CAST(:q AS vector({dimension}))
    LIMIT {per_passage}
)
SELECT doc_id, min(distance) AS distance FROM passages
GROUP BY doc_id ORDER BY min(distance), doc_id DESC LIMIT :limit"""


_SQLITE_NEAREST = """
SELECT doc_id, min(vec_distance_cosine(embedding, :q)) AS distance
FROM kb_vector
WHERE kind = :kind AND model = :model AND dimension = :dimension
GROUP BY doc_id ORDER BY distance, doc_id DESC LIMIT :limit"""


def _literal(conn: Connection, vector: Sequence[float]) -> str | bytes:
    """A vector as the database takes it: pgvector's text form, or sqlite-vec's float32 blob."""
    if conn.dialect.name == "postgresql":
        return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    return struct.pack(f"{len(vector)}f", *vector)
