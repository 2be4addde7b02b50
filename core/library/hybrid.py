"""The one ranking of the library: full-text search (words) and vector search (meaning), fused by
reciprocal rank fusion. Each ranking contributes its best ``DEPTH`` documents; a document scores
``sum(1 / (RRF_K + rank))`` over the rankings that found it, so one found by both beats one
found by either alone, and neither ranking's raw scores need to be comparable.

A vector match weaker than ``MIN_SIMILARITY`` is no match: vector search always answers with
the nearest documents, however far, and a person reading "similar past cases" expects similar.
Without a query vector (no embedding model, the endpoint failed, a database without vectors)
the ranking is the full-text search alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy import Connection, select

from core.library.search import Hit, meta_of, search
from core.library.tables import kb_doc
from core.library.vectors import Near, nearest

RRF_K = 60  # the constant of Cormack et al. (2009): ranks past the first few weigh little
DEPTH = 20  # documents each ranking contributes to the fusion
MIN_SIMILARITY = 0.2  # cosine; the embedded model's unrelated texts fall below it


def ranked(conn: Connection, query: str, kind: str, limit: int,
           meaning: Sequence[float] | None = None, model: str | None = None) -> list[Hit]:
    """The ``kind`` documents best matching ``query`` by words and, given the query's vector
    (``meaning``, made by ``model``), by meaning; best first, at most ``limit``."""
    if limit < 1:
        return []
    depth = max(limit, DEPTH)
    by_words = search(conn, query, kind, depth)
    by_meaning = [near for near in
                  (nearest(conn, meaning, model, kind, depth) if meaning and model else [])
                  if near.similarity >= MIN_SIMILARITY]
    return fuse(conn, by_words, by_meaning)[:limit]


def fuse(conn: Connection, by_words: list[Hit], by_meaning: list[Near]) -> list[Hit]:
    """Both rankings as one, by reciprocal rank fusion; each hit keeps its similarity."""
    scores: dict[int, float] = {}
    for ranking in ([hit.doc_id for hit in by_words], [near.doc_id for near in by_meaning]):
        for rank, doc_id in enumerate(ranking, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (RRF_K + rank)
    hits = {hit.doc_id: hit for hit in by_words}
    hits.update(_documents(conn, [n.doc_id for n in by_meaning if n.doc_id not in hits]))
    similarity = {near.doc_id: near.similarity for near in by_meaning}
    fused = [replace(hits[doc_id], score=round(score, 6), similarity=similarity.get(doc_id))
             for doc_id, score in scores.items() if doc_id in hits]
    return sorted(fused, key=lambda hit: (-hit.score, -hit.doc_id))


def _documents(conn: Connection, doc_ids: list[int]) -> dict[int, Hit]:
    if not doc_ids:
        return {}
    rows = conn.execute(select(kb_doc.c.id, kb_doc.c.source, kb_doc.c.kind, kb_doc.c.title,
                               kb_doc.c.meta).where(kb_doc.c.id.in_(doc_ids)))
    return {int(row.id): Hit(int(row.id), str(row.source), str(row.kind), str(row.title),
                             meta_of(row.meta), 0.0) for row in rows}
