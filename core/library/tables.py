"""The librarian's index (migration 0006): one ``kb_doc`` per closed case or runbook, its text in
``kb_chunk`` rows. The search columns are the database's own and not declared here: on
PostgreSQL a generated ``tsv tsvector`` column with a GIN index, on SQLite the FTS5 table
``kb_chunk_fts`` kept in step with ``kb_chunk`` by triggers."""

from __future__ import annotations

from sqlalchemy import Column, DateTime, ForeignKey, Index, Integer, String, Table, Text, func

from core.db.tables import BigId, Json, metadata

kb_doc = Table(
    "kb_doc",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("source", String(300), nullable=False, unique=True),  # "case:<id>", "runbook:<file>"
    Column("kind", String(16), nullable=False),  # "case" or "runbook"
    Column("title", String(300), nullable=False),
    Column("digest", String(64), nullable=False),  # of the indexed text: unchanged → skipped
    Column("meta", Json, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

kb_chunk = Table(
    "kb_chunk",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("doc_id", BigId, ForeignKey("kb_doc.id", ondelete="CASCADE"), nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("body", Text, nullable=False),
    Index("ix_kb_chunk_doc_id", "doc_id", "ordinal"),
)
