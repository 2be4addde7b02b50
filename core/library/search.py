"""Full-text search over ``kb_chunk``, ranked, one best chunk per document: PostgreSQL's
tsvector (GIN, ``ts_rank``) or SQLite's FTS5 (``bm25``). The query is the text's words, any of
which may match (a new case's title shares some words with the right past case, rarely all)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, or_, select, text

from core.analysis.catalog import title_words
from core.library.tables import kb_chunk, kb_doc

MAX_TERMS = 16
MAX_CHUNKS = 1000  # best-ranked chunks looked at on SQLite (its ranking runs per row)
COMMON_SHARE = 0.05  # PostgreSQL: a lexeme in more of the chunks than this does not find alone
COMMON_MIN_ROWS = 2000  # … once the index is this big (below, every lexeme finds)
STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "is",
    "it", "its", "of", "on", "or", "the", "to", "was", "were", "with", "after", "before", "over",
    "under", "during", "since", "into", "than", "then", "this", "that", "these", "those", "our",
    "we", "us", "you", "not", "no"))

# PostgreSQL: chunks are found (GIN) by the query's discriminating lexemes, or by all of its
# common ones together, and ranked by every lexeme. A lexeme ANALYZE saw in more than :common of
# a table of at least :min_rows chunks (pg_stats.most_common_elems) discriminates little alone
# and would make the database rank most of the table. When every lexeme is that common, or
# before any ANALYZE, any of them finds.
_PG = text("""
WITH common AS (
    SELECT e.lexeme FROM pg_stats s,
        unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(lexeme, freq)
    WHERE s.schemaname = current_schema() AND s.tablename = 'kb_chunk' AND s.attname = 'tsv'
        AND e.lexeme IS NOT NULL AND e.freq > :common
        AND (SELECT reltuples FROM pg_class WHERE oid = 'kb_chunk'::regclass) >= :min_rows
), wanted AS (
    SELECT quote_literal(lexeme) AS term, lexeme IN (SELECT lexeme FROM common) AS is_common
    FROM unnest(tsvector_to_array(to_tsvector('english', :text))) AS lexeme
), parts AS (
    SELECT string_agg(term, ' | ') AS any_term,
        string_agg(term, ' | ') FILTER (WHERE NOT is_common) AS rare,
        string_agg(term, ' & ') FILTER (WHERE is_common) AS all_common,
        count(*) FILTER (WHERE is_common) AS commons
    FROM wanted
), q AS (
    SELECT any_term::tsquery AS ranked,
        (CASE WHEN rare IS NULL THEN any_term
              WHEN commons >= 2 THEN rare || ' | (' || all_common || ')'
              ELSE rare END)::tsquery AS found
    FROM parts
)
SELECT d.id, d.source, d.kind, d.title, d.meta, max(ts_rank(c.tsv, q.ranked, 1)) AS score
FROM q
JOIN kb_chunk c ON c.tsv @@ q.found
JOIN kb_doc d ON d.id = c.doc_id
WHERE d.kind = :kind
GROUP BY d.id
ORDER BY score DESC, d.id DESC
LIMIT :limit
""")
_SQLITE = text("""
WITH hits AS (
    SELECT rowid AS chunk_id, rank
    FROM kb_chunk_fts WHERE kb_chunk_fts MATCH :terms
    ORDER BY rank LIMIT :chunks
)
SELECT d.id, d.source, d.kind, d.title, d.meta, -min(hits.rank) AS score
FROM hits
JOIN kb_chunk c ON c.id = hits.chunk_id
JOIN kb_doc d ON d.id = c.doc_id
WHERE d.kind = :kind
GROUP BY d.id
ORDER BY score DESC, d.id DESC
LIMIT :limit
""")


@dataclass(frozen=True)
class Hit:
    """One document and how well it matched (higher is better), and by meaning its nearest
    passage's cosine ``similarity`` (None: not found that way; ``core.library.hybrid``)."""

    doc_id: int
    source: str
    kind: str
    title: str
    meta: dict[str, Any]
    score: float
    similarity: float | None = None


def query_terms(query: str) -> list[str]:
    """The words of ``query`` worth searching for: no stopwords, no repeats, at most 16."""
    terms: list[str] = []
    for word in title_words(query):
        if word not in STOPWORDS and len(word) > 1 and word not in terms:
            terms.append(word)
    return terms[:MAX_TERMS]


def search(conn: Connection, query: str, kind: str, limit: int) -> list[Hit]:
    """The ``kind`` documents best matching ``query``, best first."""
    terms = query_terms(query)
    if not terms or limit < 1:
        return []
    params: dict[str, Any] = {"kind": kind, "limit": limit}
    if conn.dialect.name == "postgresql":
        statement = _PG
        params.update(text=" ".join(terms), common=COMMON_SHARE, min_rows=COMMON_MIN_ROWS)
    else:
        statement = _SQLITE
        params.update(terms=fts5_query(conn, terms), chunks=MAX_CHUNKS)
    rows = conn.execute(statement, params).mappings()
    return [Hit(int(row["id"]), str(row["source"]), str(row["kind"]), str(row["title"]),
                meta_of(row["meta"]), float(row["score"])) for row in rows]


def fts5_query(conn: Connection, terms: list[str]) -> str:
    """The FTS5 MATCH expression for ``terms``: as on PostgreSQL, once the index holds
    ``COMMON_MIN_ROWS`` chunks a word in more than ``COMMON_SHARE`` of them finds only together
    with the query's other common words (counting a word's chunks reads its doclist, no rank)."""
    # Words are [a-z0-9]+ (title_words), so no FTS5 syntax can slip in.
    quoted = [f'"{term}"' for term in terms]
    total = int(conn.execute(_CHUNKS).scalar_one())
    if total < COMMON_MIN_ROWS:
        return " OR ".join(quoted)
    common = [q for q in quoted
              if int(conn.execute(_MATCHES, {"term": q}).scalar_one()) > COMMON_SHARE * total]
    rare = [q for q in quoted if q not in common]
    if not rare:
        return " OR ".join(quoted)
    together = [f"({' AND '.join(common)})"] if len(common) >= 2 else []
    return " OR ".join([*rare, *together])


# max(id): an upper bound of the row count, read from the primary key at once
_CHUNKS = text("SELECT coalesce(max(id), 0) FROM kb_chunk")
_MATCHES = text("SELECT count(*) FROM kb_chunk_fts WHERE kb_chunk_fts MATCH :term")


def meta_of(value: Any) -> dict[str, Any]:
    """A document's ``meta`` as read (a raw text() query on SQLite hands JSON back as text)."""
    if isinstance(value, str):
        loaded = json.loads(value)
        return dict(loaded) if isinstance(loaded, dict) else {}
    return dict(value or {})


def like_scan(conn: Connection, query: str, kind: str, limit: int) -> list[int]:
    """The baseline the benchmark compares against: ``lower(body) LIKE '%word%'`` for any word,
    documents by how many chunks matched. No index can help it."""
    terms = query_terms(query)
    if not terms:
        return []
    body = func.lower(kb_chunk.c.body)
    statement = (select(kb_doc.c.id, func.count().label("score"))
                 .select_from(kb_chunk.join(kb_doc, kb_doc.c.id == kb_chunk.c.doc_id))
                 .where(or_(*(body.like(f"%{term}%") for term in terms)), kb_doc.c.kind == kind)
                 .group_by(kb_doc.c.id)
                 .order_by(func.count().desc(), kb_doc.c.id.desc()).limit(limit))
    rows = conn.execute(statement)
    return [int(row[0]) for row in rows]

