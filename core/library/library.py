"""The librarian: indexes what resolved past cases (title, findings, the plan that worked, its
verification) and the runbooks folder, and recalls them for a new case by words and by meaning
(``core.library.hybrid``). A case closed on stand-in readings (``OPSGATE_STATIC_METRICS``) is
recalled as such, never offered as a fix.

A document is replaced whole when its text changes (its digest), so indexing is idempotent:
re-indexing a case or an unchanged runbook writes nothing. Its passages (its title, then each
chunk) are embedded after its text is written: a model that fails leaves the document found by
words until ``reindex``. Vectors of one model only are kept: with another model configured,
none is written or compared until ``reindex`` (``vectors_problem`` says so in one line).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from core.analysis.tables import evidence_link
from core.cases.timeline import entry_of
from core.db import case_store
from core.db.database import connection, transaction
from core.domain.fsm import CaseStatus
from core.domain.messages import Recall
from core.errors import NotFound, Unavailable
from core.library import vectors
from core.library.embeddings import Embedder
from core.library.hybrid import MIN_SIMILARITY, ranked
from core.library.runbooks import EXCERPT_CHARS, TEMPLATE, RunbookHit, runbook_title
from core.library.search import Hit, query_terms
from core.library.tables import kb_chunk, kb_doc

log = logging.getLogger(__name__)

CHUNK_CHARS = 1500  # a runbook section longer than this is cut at paragraph breaks
MIN_SHARED_WORDS = 2  # words a past case's title must share with a new one to lend its plan
LENDERS_SEARCHED = 10  # similar cases looked through for the most similar verified one
REINDEX_BATCH = 64  # documents embedded and written at a time


@dataclass(frozen=True)
class Document:
    """What one indexed document says: ``chunks`` are searched, ``meta`` is handed back."""

    source: str
    kind: str
    title: str
    chunks: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        body = "\x1e".join([self.title, *self.chunks]).encode("utf-8")
        return hashlib.sha256(body).hexdigest()

    @property
    def passages(self) -> list[str]:
        """What is embedded: the title, then each chunk."""
        return passages_of(self.title, self.chunks)


def passages_of(title: str, chunks: Sequence[str]) -> list[str]:
    return [title, *(chunk for chunk in chunks if chunk != title)]


@dataclass(frozen=True)
class Reindexed:
    """What ``Library.reindex`` did."""

    documents: int
    passages: int
    model: str
    dimension: int

    def line(self, seconds: float) -> str:
        return (f"reindexed {self.documents} documents ({self.passages} passages) with "
                f"{self.model} ({self.dimension} dimensions) in {seconds:.1f} s")


class Library:
    """Index and recall, on the case database, with ``embedder`` (None: by words only)."""

    def __init__(self, engine: Engine, embedder: Embedder | None = None) -> None:
        self.engine = engine
        self.embedder = embedder
        self._problem: str | bool | None = False  # False: not looked at yet
        self.model_failed: str | None = None  # why the model's last answer failed, if it did

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
        self._embed(doc_id, document.kind, document.passages)
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

    # -- vectors --------------------------------------------------------------------------

    def vectors_problem(self) -> str | None:
        """Why recall is by words only, in one line (no model, no vector store, vectors of
        another model); None when it is by meaning too. Looked at once."""
        if self._problem is False:
            self._problem = self._look_at_vectors()
            if self._problem:
                log.warning("librarian: %s", self._problem)
        return self._problem if isinstance(self._problem, str) else None

    def _look_at_vectors(self) -> str | None:
        if self.embedder is None:
            return ("OPSGATE_EMBEDDINGS_MODEL is none: the librarian recalls by words only "
                    "(full-text search)")
        with connection(self.engine) as conn:
            missing = vectors.missing_store(conn)
            stored = [] if missing else vectors.stored_models(conn)
        if missing:
            return missing
        others = [f"{model} ({dimension} dimensions)" for model, dimension in stored
                  if model != self.embedder.model]
        if others:
            return (f"the library's vectors were made by {', '.join(others)}, not "
                    f"OPSGATE_EMBEDDINGS_MODEL={self.embedder.model}: recall is by words only "
                    "until `opsgate library reindex`")
        return None

    def _embed(self, doc_id: int, kind: str, passages: list[str]) -> None:
        if self.embedder is None or self.vectors_problem():
            return
        made = self._embedded(passages)
        if made is None:
            log.warning("librarian: document %s is found by words only until reindexed: %s",
                        doc_id, self.model_failed)
            return
        with transaction(self.engine) as conn:
            vectors.store(conn, doc_id, kind, self.embedder.model, made)

    def reindex(self, progress: Callable[[int, int], None] = lambda done, total: None,
                batch: int = REINDEX_BATCH) -> Reindexed:
        """Embed every indexed document's passages again with this library's model, replacing
        the vectors of any other; makes the vector store first when the database can now hold
        one (pgvector enabled after the upgrade). ``progress(done, total)`` after each batch.
        ``Unavailable`` when there is no model, no store, or the model fails (the vectors
        written so far stay: running it again finishes the job)."""
        if self.embedder is None:
            raise Unavailable("OPSGATE_EMBEDDINGS_MODEL is none: there is no model to reindex "
                              "with")
        with transaction(self.engine) as conn:
            missing = vectors.create_store(conn)
        if missing:
            raise Unavailable(missing)
        self._problem = None
        with connection(self.engine) as conn:
            doc_ids = [int(i) for i in conn.execute(select(kb_doc.c.id).order_by(kb_doc.c.id))
                       .scalars()]
        done = passages = 0
        dimension = 0
        for start in range(0, len(doc_ids), batch):
            passages, dimension = self._reindex(doc_ids[start:start + batch], passages)
            done = min(start + batch, len(doc_ids))
            progress(done, len(doc_ids))
        with transaction(self.engine) as conn:
            vectors.drop_other_models(conn, self.embedder.model)
            vectors.ensure_index(conn, dimension)
        return Reindexed(len(doc_ids), passages, self.embedder.model, dimension)

    def _reindex(self, doc_ids: list[int], passages: int) -> tuple[int, int]:
        assert self.embedder is not None
        with connection(self.engine) as conn:
            documents = _held_documents(conn, doc_ids)
        texts = [passages_of(title, chunks) for _doc_id, _kind, title, chunks in documents]
        made = self.embedder.embed([text for group in texts for text in group])
        dimension = len(made[0]) if made else 0
        with transaction(self.engine) as conn:
            at = 0
            for (doc_id, kind, _title, _chunks), group in zip(documents, texts, strict=True):
                vectors.store(conn, doc_id, kind, self.embedder.model, made[at:at + len(group)])
                at += len(group)
        return passages + len(made), dimension

    def meaning_of(self, text: str) -> list[float] | None:
        """``text``'s vector, or None (no model or store, or the model failed: by words)."""
        if self.embedder is None or self.vectors_problem() or not text.strip():
            return None
        made = self._embedded([text])
        if made is None:
            log.warning("librarian: recall by words only for now: %s", self.model_failed)
        return None if made is None else made[0]

    def _embedded(self, texts: list[str]) -> list[list[float]] | None:
        """The model's vectors for ``texts``; None when it failed (``model_failed`` says why
        until it answers again)."""
        assert self.embedder is not None
        try:
            made = self.embedder.embed(texts)
        except Unavailable as exc:
            self.model_failed = exc.message
            return None
        self.model_failed = None
        return made

    def ranked(self, text: str, kind: str, limit: int) -> list[Hit]:
        """The one ranking (``core.library.hybrid``) of the ``kind`` documents for ``text``."""
        meaning = self.meaning_of(text)
        model = None if self.embedder is None else self.embedder.model
        with connection(self.engine) as conn:
            return ranked(conn, text, kind, limit, meaning, model)

    # -- recall ---------------------------------------------------------------------------

    def similar_cases(self, text: str, limit: int = 3,
                      exclude: UUID | None = None) -> list[dict[str, Any]]:
        """Closed cases most like ``text``, best first, each with what resolved it:
        ``case_id``, ``title``, ``resolved_by`` (the plan's title), ``plan_hash``,
        ``verification``, ``stand_in`` (closed on stand-in readings: not verified),
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
        readings was never verified: it lends no plan."""
        similar_cases = self.similar_cases(text, limit=LENDERS_SEARCHED, exclude=exclude)
        for similar in [case for case in similar_cases if not case["stand_in"]][:1]:
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


def _held_documents(conn: Connection,
                    doc_ids: list[int]) -> list[tuple[int, str, str, list[str]]]:
    """``(doc_id, kind, title, chunks)`` of each of ``doc_ids``, in order."""
    rows = conn.execute(select(kb_doc.c.id, kb_doc.c.kind, kb_doc.c.title, kb_chunk.c.body)
                        .join(kb_chunk, kb_chunk.c.doc_id == kb_doc.c.id, isouter=True)
                        .where(kb_doc.c.id.in_(doc_ids))
                        .order_by(kb_doc.c.id, kb_chunk.c.ordinal)).all()
    held: dict[int, tuple[int, str, str, list[str]]] = {}
    for doc_id, kind, title, body in rows:
        found = held.setdefault(int(doc_id), (int(doc_id), str(kind), str(title), []))
        if body is not None:
            found[3].append(str(body))
    return list(held.values())


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
            "stand_in": bool(meta.get("stand_in")), "findings": meta.get("findings", []),
            "score": round(hit.score, 4), "similarity": hit.similarity}


def _runbook_hit(hit: Hit) -> RunbookHit:
    path = Path(str(hit.meta.get("path")))
    text = path.read_text("utf-8") if path.is_file() else ""
    return RunbookHit(runbook=path.stem, title=hit.title, path=str(path), score=hit.score,
                      templates=list(dict.fromkeys(TEMPLATE.findall(text))),
                      excerpt=text[:EXCERPT_CHARS])


# -- what a case and a runbook say ---------------------------------------------------------

def case_document(conn: Connection, case_id: UUID) -> Document | None:
    """A CLOSED case as a document: title, findings, the plan that worked and its
    verification; None when the case is not closed."""
    case = case_store.read_case(conn, case_id)
    if case is None or case["status"] != CaseStatus.CLOSED:
        return None
    plan_row = case_store.latest_plan(conn, case_id)
    plan: Mapping[str, Any] = {} if plan_row is None else plan_row["plan"]
    findings = [str(s) for s in conn.execute(
        select(evidence_link.c.summary).where(evidence_link.c.case_id == case_id)
        .order_by(evidence_link.c.id)).scalars()]
    timeline = case_store.read_timeline(conn, case_id)
    verification, stand_in = _verification(timeline), _closed_on_stand_in(timeline)
    steps = ", ".join(_step_words(step) for step in plan.get("steps", []))
    lines = [str(case["title"]), *(f"finding: {f}" for f in findings),
             f"resolved by: {plan.get('title', 'no plan')} ({steps})",
             f"{'not verified' if stand_in else 'verified'}: {verification}"]
    meta = {"case_id": str(case_id), "resolved_by": plan.get("title"),
            "plan_hash": None if plan_row is None else plan_row["plan_hash"],
            "verification": verification, "findings": findings,
            "severity": case["severity"], "stand_in": stand_in}
    return Document(f"case:{case_id}", "case", str(case["title"]), ["\n".join(lines)], meta)


def _verification(timeline: Sequence[Mapping[Any, Any]]) -> str:
    for row in reversed(timeline):
        if row["event"] in ("verify_result", "verify_pass") and row["reason"]:
            return str(row["reason"])
    return "verified"


def _closed_on_stand_in(timeline: Sequence[Mapping[Any, Any]]) -> bool:
    """Whether the verdict that closed the case was read from a stand-in table."""
    for row in reversed(timeline):
        if row["event"] == "verify_result":
            return bool(entry_of(row).context.get("stand_in"))
    return False


def _step_words(step: Mapping[str, Any]) -> str:
    params = step.get("params") or {}
    named = [str(v) for k, v in sorted(params.items())
             if k in ("deployment", "service", "target", "argv", "url", "to")]
    return " ".join([str(step.get("action", "")), *named])


def runbook_document(path: Path) -> Document:
    """A runbook: its first heading is its title; each section (``##``) is a chunk, long
    sections cut at paragraph breaks."""
    text = path.read_text(encoding="utf-8")
    title = runbook_title(text, path)
    sections = [s.strip() for s in re.split(r"^(?=##\s)", text, flags=re.MULTILINE)]
    chunks = [piece for section in sections if section for piece in _cut(section)]
    return Document(f"runbook:{path.name}", "runbook", title, chunks or [title],
                    {"path": str(path), "file": path.name})


def _cut(section: str) -> list[str]:
    pieces: list[str] = []
    current = ""
    for paragraph in section.split("\n\n"):
        if current and len(current) + len(paragraph) > CHUNK_CHARS:
            pieces.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    return [*pieces, current] if current else pieces
