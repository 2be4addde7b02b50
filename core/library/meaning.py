"""The library's meaning: its embedding model and the vectors it made (``core.library.vectors``).

``Meaning`` embeds a document's passages (its title, then each chunk) after its text is written,
embeds a query, says in one line why recall is by words only (no model, no vector store, vectors
of another model: ``problem``; the model's last answer failed: ``failed``), and ``reindex``es
everything with the configured model. Vectors of one model only are kept: with another model
configured, none is written or compared until ``reindex``. A model that fails leaves a document
found by words until then; nothing is lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select

from core.db.database import connection, transaction
from core.errors import Unavailable
from core.library import vectors
from core.library.documents import passages_of
from core.library.embeddings import Embedder
from core.library.tables import kb_chunk, kb_doc

log = logging.getLogger(__name__)

REINDEX_BATCH = 64  # documents embedded and written at a time
LOOK_AGAIN_S = 60.0  # a running process sees pgvector enabled, or a reindex, this soon
NO_MODEL = "OPSGATE_EMBEDDINGS_MODEL is none: the librarian recalls by words only (full-text " \
           "search)"


@dataclass(frozen=True)
class Reindexed:
    """What ``Meaning.reindex`` did."""

    documents: int
    passages: int
    model: str
    dimension: int

    def line(self, seconds: float) -> str:
        return (f"reindexed {self.documents} documents ({self.passages} passages) with "
                f"{self.model} ({self.dimension} dimensions) in {seconds:.1f} s")


class Meaning:
    """The embedding model (None: by words only) and the vectors on ``engine``."""

    def __init__(self, engine: Engine, embedder: Embedder | None) -> None:
        self.engine = engine
        self.embedder = embedder
        self.failed: str | None = None  # why the model's last answer failed, if it did
        self._problem: str | None = None
        self._looked_at: float | None = None  # monotonic; None: not looked at yet
        self._last: tuple[str, list[float]] | None = None  # the last query and its vector

    @property
    def model(self) -> str | None:
        return None if self.embedder is None else self.embedder.model

    def problem(self) -> str | None:
        """Why recall is by words only, in one line (no model, no vector store, vectors of
        another model); None when it is by meaning too. Looked at again after
        ``LOOK_AGAIN_S``; said in the log when it changes."""
        now = time.monotonic()
        if self._looked_at is None or now - self._looked_at >= LOOK_AGAIN_S:
            problem, self._looked_at = self._look(), now
            if problem and problem != self._problem:
                log.warning("librarian: %s", problem)
            self._problem = problem
        return self._problem

    def _look(self) -> str | None:
        if self.embedder is None:
            return NO_MODEL
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

    def of(self, text: str) -> list[float] | None:
        """``text``'s vector, or None (no model or store, or the model failed: by words). The
        last one is kept: one case's recall asks for its title's several times (similar cases,
        runbooks, the plan to learn), and an endpoint model would be asked each time."""
        if self.problem() or not text.strip():
            return None
        last = self._last
        if last is not None and last[0] == text:
            return last[1]
        made = self._embedded([text])
        if made is None:
            log.warning("librarian: recall by words only for now: %s", self.failed)
            return None
        self._last = (text, made[0])
        return made[0]

    def embed(self, doc_id: int, kind: str, passages: list[str]) -> None:
        """Replace document ``doc_id``'s vectors (none when recall is by words only)."""
        if self.problem():
            return
        made = self._embedded(passages)
        if made is None:
            log.warning("librarian: document %s is found by words only until reindexed: %s",
                        doc_id, self.failed)
            return
        with transaction(self.engine) as conn:
            vectors.store(conn, doc_id, kind, str(self.model), made)

    def _embedded(self, texts: list[str]) -> list[list[float]] | None:
        """The model's vectors for ``texts``; None when it failed (``failed`` says why until it
        answers again)."""
        assert self.embedder is not None
        try:
            made = self.embedder.embed(texts)
        except Unavailable as exc:
            self.failed = exc.message
            return None
        self.failed = None
        return made

    def reindex(self, progress: Callable[[int, int], None] = lambda done, total: None,
                batch: int = REINDEX_BATCH) -> Reindexed:
        """Embed every indexed document's passages again with this model, replacing the vectors
        of any other; makes the vector store first when the database can now hold one (pgvector
        enabled after the upgrade). ``progress(done, total)`` after each batch. ``Unavailable``
        when there is no model, no store, or the model fails (the vectors written so far stay:
        running it again finishes the job)."""
        if self.embedder is None:
            raise Unavailable("OPSGATE_EMBEDDINGS_MODEL is none: there is no model to reindex "
                              "with")
        with transaction(self.engine) as conn:
            missing = vectors.create_store(conn)
        if missing:
            raise Unavailable(missing)
        self._problem, self._looked_at = None, time.monotonic()
        with connection(self.engine) as conn:
            doc_ids = [int(i) for i in conn.execute(select(kb_doc.c.id).order_by(kb_doc.c.id))
                       .scalars()]
        passages = dimension = 0
        for start in range(0, len(doc_ids), batch):
            made, dimension = self._reindex(doc_ids[start:start + batch])
            passages += made
            progress(min(start + batch, len(doc_ids)), len(doc_ids))
        with transaction(self.engine) as conn:
            vectors.drop_other_models(conn, self.embedder.model)
            vectors.ensure_index(conn, dimension)
        return Reindexed(len(doc_ids), passages, self.embedder.model, dimension)

    def _reindex(self, doc_ids: list[int]) -> tuple[int, int]:
        """Embed and store one batch; how many passages, and their dimension."""
        assert self.embedder is not None
        with connection(self.engine) as conn:
            documents = _held_documents(conn, doc_ids)
        texts = [passages_of(title, chunks) for _doc_id, _kind, title, chunks in documents]
        made = self.embedder.embed([text for group in texts for text in group])
        with transaction(self.engine) as conn:
            at = 0
            for (doc_id, kind, _title, _chunks), group in zip(documents, texts, strict=True):
                vectors.store(conn, doc_id, kind, self.embedder.model, made[at:at + len(group)])
                at += len(group)
        return len(made), len(made[0]) if made else 0


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
