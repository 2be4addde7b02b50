"""The librarian: indexes what resolved past cases and the runbooks folder
(``core.library.documents``), and recalls them for a new case by words and by meaning (the one
ranking, ``core.library.hybrid``; the vectors, ``core.library.meaning``). A case closed on
stand-in readings (``OPSGATE_STATIC_METRICS``) is recalled as such, never offered as a fix.

A document is replaced whole when its text changes (its digest), so indexing is idempotent:
re-indexing a case or an unchanged runbook writes nothing; its passages are embedded after its
text is written.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from core.analysis.tables import evidence_link
from core.db import case_store
from core.db.database import connection, transaction
from core.domain.messages import Recall
from core.errors import NotFound
from core.library.documents import Document, case_document, runbook_document
from core.library.embeddings import Embedder
from core.library.hybrid import MIN_SIMILARITY, ranked
from core.library.meaning import Meaning
from core.library.runbooks import EXCERPT_CHARS, TEMPLATE, RunbookHit
from core.library.search import Hit, query_terms
from core.library.tables import kb_chunk, kb_doc

MIN_SHARED_WORDS = 2  # words a past case's title must share with a new one to lend its plan
LENDERS_SEARCHED = 10  # similar cases looked through for the most similar verified one


class Library:
    """Index and recall, on the case database, with ``embedder`` (None: by words only)."""

    def __init__(self, engine: Engine, embedder: Embedder | None = None) -> None:
        self.engine = engine
        self.meaning = Meaning(engine, embedder)

    # -- indexing -------------------------------------------------------------------------

    def index_case(self, case_id: UUID) -> bool:
        """Index a CLOSED case; False (nothing written) when it is not closed or unchanged."""
        with connection(self.engine) as conn:
            document = case_document(conn, case_id)
        return document is not None and self.index(document)

    def index_runbooks(self, folder: str | Path) -> int:
        """Index every ``*.md`` of ``folder``; how many were new or changed. A missing folder
        indexes nothing."""
        root = Path(folder)
        if not root.is_dir():
            return 0
        return sum(self.index(runbook_document(path)) for path in sorted(root.glob("*.md")))

    def index(self, document: Document) -> bool:
        """Write ``document`` unless the same text is indexed already; True when written. Two
        writers of one new document race on its unique source: the loser writes nothing."""
        try:
            doc_id = self._index(document)
        except IntegrityError:
            return False
        if doc_id is None:
            return False
        self.meaning.embed(doc_id, document.kind, document.passages)
        return True

    def _index(self, document: Document) -> int | None:
        with transaction(self.engine) as conn:
            found = conn.execute(select(kb_doc.c.id, kb_doc.c.digest)
                                 .where(kb_doc.c.source == document.source)).first()
            if found is not None and found.digest == document.digest:
                return None
            doc_id = _upsert_doc(conn, document, None if found is None else int(found.id))
            conn.execute(delete(kb_chunk).where(kb_chunk.c.doc_id == doc_id))
            conn.execute(insert(kb_chunk), [{"doc_id": doc_id, "ordinal": n, "body": body}
                                            for n, body in enumerate(document.chunks)])
        return doc_id

    def ranked(self, text: str, kind: str, limit: int) -> list[Hit]:
        """The one ranking (``core.library.hybrid``) of the ``kind`` documents for ``text``."""
        vector = self.meaning.of(text)
        with connection(self.engine) as conn:
            return ranked(conn, text, kind, limit, vector, self.meaning.model)

    # -- recall ---------------------------------------------------------------------------

    def similar_cases(self, text: str, limit: int = 3,
                      exclude: UUID | None = None) -> list[dict[str, Any]]:
        """Closed cases most like ``text``, best first, each with what resolved it:
        ``case_id``, ``title``, ``resolved_by`` (the plan's title), ``plan_hash``,
        ``verification``, ``stand_in`` (closed on stand-in readings: not verified),
        ``series_read`` (closed on readings of the component's series: a plan it may lend),
        ``findings``, ``score``."""
        hits = self.ranked(text, "case", limit + (exclude is not None))
        cases = [_case_hit(hit) for hit in hits]
        return [c for c in cases if exclude is None or c["case_id"] != str(exclude)][:limit]

    def relevant_runbooks(self, text: str, limit: int = 3) -> list[dict[str, Any]]:
        """The indexed runbooks most relevant to ``text``, by the one ranking: ``title``,
        ``path``, ``score``."""
        return [{"title": hit.title, "path": str(hit.meta.get("path", "")), "score": hit.score}
                for hit in self.ranked(text, "runbook", limit)]

    def find_runbooks(self, folder: Path, query: str, limit: int = 3) -> list[RunbookHit]:
        """The ``limit`` runbooks of ``folder`` best matching ``query`` (the agent's and the MCP
        server's ``runbooks`` tool), with the plan templates each names and an excerpt. The
        folder is indexed first: an edited runbook is read again, an unchanged one is not."""
        self.index_runbooks(folder)
        files = {str(path) for path in folder.glob("*.md")} if folder.is_dir() else set()
        found = [hit for hit in self.ranked(query, "runbook", limit + len(files))
                 if str(hit.meta.get("path")) in files][:limit]
        return [_runbook_hit(hit) for hit in found]

    def best_plan_for(self, text: str, exclude: UUID | None = None,
                      min_shared: int = MIN_SHARED_WORDS) -> dict[str, Any] | None:
        """The plan that resolved the most similar verified case: ``plan``, ``case_id`` (the
        case it was learned from), ``title``, ``score``, ``shared`` (the words its title shares
        with ``text``), ``similarity`` (by meaning; None: not found that way); None when no case
        is that similar (fewer than ``min_shared`` shared words and no similarity of meaning:
        one common word is no reason to repeat someone else's change). A case closed on stand-in
        readings was never verified, nor one whose checks read no series of its component (a
        probe, ``vector(0)``): neither lends a plan."""
        similar_cases = self.similar_cases(text, limit=LENDERS_SEARCHED, exclude=exclude)
        measured = [case for case in similar_cases if case["series_read"]]
        for similar in measured[:1]:
            shared = shared_words(text, str(similar["title"]))
            similarity = similar.get("similarity")
            if len(shared) < min_shared and (similarity is None or similarity < MIN_SIMILARITY):
                return None
            with connection(self.engine) as conn:
                row = case_store.latest_plan(conn, UUID(similar["case_id"]))
            if row is not None:
                return {"plan": dict(row["plan"]), "case_id": similar["case_id"],
                        "title": similar["title"], "score": similar["score"],
                        "shared": shared, "similarity": similarity}
        return None

    def recall(self, text: str, exclude: UUID | None = None) -> Recall:
        """What a new case's thread and agent get: ``similar_cases`` and ``runbooks``."""
        return {"similar_cases": self.similar_cases(text, exclude=exclude),
                "runbooks": self.relevant_runbooks(text)}

    def evidence_for(self, case_id: UUID) -> dict[str, Any]:
        """Everything known for a case's planning (the agent's context, ``/case similar``):
        its ``findings``, ``similar_cases``, ``runbooks`` and the ``best_plan`` (or None)."""
        with connection(self.engine) as conn:
            case = case_store.read_case(conn, case_id)
            if case is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            findings = [dict(data) for data in conn.execute(
                select(evidence_link.c.data).where(evidence_link.c.case_id == case_id)
                .order_by(evidence_link.c.id)).scalars()]
        title = str(case["title"])
        return {"case_id": str(case_id), "title": title, "findings": findings,
                **self.recall(title, exclude=case_id),
                "best_plan": self.best_plan_for(title, exclude=case_id)}


def shared_words(text: str, other: str) -> list[str]:
    """The search words of ``text`` that ``other`` has too (compared by their first five
    letters, a crude stem: "deploy" and "deployment" are one word)."""
    theirs = {word[:5] for word in query_terms(other)}
    return [word for word in query_terms(text) if word[:5] in theirs]


def _upsert_doc(conn: Connection, document: Document, doc_id: int | None) -> int:
    values = {"kind": document.kind, "title": document.title[:300], "digest": document.digest,
              "meta": document.meta, "updated_at": datetime.now(UTC)}
    if doc_id is not None:
        conn.execute(update(kb_doc).where(kb_doc.c.id == doc_id).values(values))
        return doc_id
    inserted = conn.execute(insert(kb_doc).values(source=document.source, **values)
                            .returning(kb_doc.c.id))
    return int(inserted.scalar_one())


def _case_hit(hit: Hit) -> dict[str, Any]:
    meta = hit.meta
    return {"case_id": meta.get("case_id"), "title": hit.title,
            "resolved_by": meta.get("resolved_by"), "plan_hash": meta.get("plan_hash"),
            "verification": meta.get("verification"),
            "stand_in": bool(meta.get("stand_in")),
            "series_read": bool(meta.get("series_read")), "findings": meta.get("findings", []),
            "score": round(hit.score, 4), "similarity": hit.similarity}


def _runbook_hit(hit: Hit) -> RunbookHit:
    path = Path(str(hit.meta.get("path")))
    text = path.read_text("utf-8") if path.is_file() else ""
    return RunbookHit(runbook=path.stem, title=hit.title, path=str(path), score=hit.score,
                      templates=list(dict.fromkeys(TEMPLATE.findall(text))),
                      excerpt=text[:EXCERPT_CHARS])
