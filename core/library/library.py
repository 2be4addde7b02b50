"""The librarian: indexes what resolved past cases (title, findings, the plan that worked, its
verification) and the runbooks folder, and recalls them for a new case. A case closed on
stand-in readings (``OPSGATE_STATIC_METRICS``) is recalled as such, never offered as a fix.

A document is replaced whole when its text changes (its digest), so indexing is idempotent:
re-indexing a case or an unchanged runbook writes nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
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
from core.errors import NotFound
from core.library.runbooks import Runbook, rank, runbook_title
from core.library.search import Hit, query_terms, search
from core.library.tables import kb_chunk, kb_doc

CHUNK_CHARS = 1500  # a runbook section longer than this is cut at paragraph breaks
MIN_SHARED_WORDS = 2  # words a past case's title must share with a new one to lend its plan
LENDERS_SEARCHED = 10  # similar cases looked through for the most similar verified one


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


class Library:
    """Index and recall, on the case database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

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
            return self._index(document)
        except IntegrityError:
            return False

    def _index(self, document: Document) -> bool:
        with transaction(self.engine) as conn:
            found = conn.execute(select(kb_doc.c.id, kb_doc.c.digest)
                                 .where(kb_doc.c.source == document.source)).first()
            if found is not None and found.digest == document.digest:
                return False
            doc_id = _upsert_doc(conn, document, None if found is None else int(found.id))
            conn.execute(delete(kb_chunk).where(kb_chunk.c.doc_id == doc_id))
            conn.execute(insert(kb_chunk), [{"doc_id": doc_id, "ordinal": n, "body": body}
                                            for n, body in enumerate(document.chunks)])
        return True

    # -- recall ---------------------------------------------------------------------------

    def similar_cases(self, text: str, limit: int = 3,
                      exclude: UUID | None = None) -> list[dict[str, Any]]:
        """Closed cases most like ``text``, best first, each with what resolved it:
        ``case_id``, ``title``, ``resolved_by`` (the plan's title), ``plan_hash``,
        ``verification``, ``stand_in`` (closed on stand-in readings: not verified),
        ``findings``, ``score``."""
        with connection(self.engine) as conn:
            hits = search(conn, text, "case", limit + (exclude is not None))
        cases = [_case_hit(hit) for hit in hits]
        return [c for c in cases if exclude is None or c["case_id"] != str(exclude)][:limit]

    def relevant_runbooks(self, text: str, limit: int = 3) -> list[dict[str, Any]]:
        """The indexed runbooks most relevant to ``text`` (the one runbook ranking,
        ``core.library.runbooks.rank``): ``title``, ``path``, ``score``."""
        with connection(self.engine) as conn:
            books = self._runbooks_held(conn)
        return [{"title": book.title, "path": book.path, "score": score}
                for score, book in rank(text, books)[:limit]]

    @staticmethod
    def _runbooks_held(conn: Connection) -> list[Runbook]:
        rows = conn.execute(select(kb_doc.c.title, kb_doc.c.meta, kb_chunk.c.body)
                            .join(kb_chunk, kb_chunk.c.doc_id == kb_doc.c.id)
                            .where(kb_doc.c.kind == "runbook")
                            .order_by(kb_doc.c.id, kb_chunk.c.ordinal)).all()
        texts: dict[str, list[str]] = {}
        titles: dict[str, str] = {}
        for title, meta, body in rows:
            path = str((meta or {}).get("path", ""))
            texts.setdefault(path, []).append(body)
            titles[path] = title
        return [Runbook(Path(path).stem, titles[path], "\n\n".join(chunks), path)
                for path, chunks in texts.items()]

    def best_plan_for(self, text: str, exclude: UUID | None = None,
                      min_shared: int = MIN_SHARED_WORDS) -> dict[str, Any] | None:
        """The plan that resolved the most similar verified case: ``plan``, ``case_id`` (the
        case it was learned from), ``title``, ``score``, ``shared`` (the words its title shares
        with ``text``); None when no case is that similar (fewer than ``min_shared`` shared
        words: one common word is no reason to repeat someone else's change). A case closed on
        stand-in readings was never verified: it lends no plan."""
        similar_cases = self.similar_cases(text, limit=LENDERS_SEARCHED, exclude=exclude)
        for similar in [case for case in similar_cases if not case["stand_in"]][:1]:
            shared = shared_words(text, str(similar["title"]))
            if len(shared) < min_shared:
                return None
            with connection(self.engine) as conn:
                row = case_store.latest_plan(conn, UUID(similar["case_id"]))
            if row is not None:
                return {"plan": dict(row["plan"]), "case_id": similar["case_id"],
                        "title": similar["title"], "score": similar["score"],
                        "shared": shared}
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
            "stand_in": bool(meta.get("stand_in")), "findings": meta.get("findings", []),
            "score": round(hit.score, 4)}


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
