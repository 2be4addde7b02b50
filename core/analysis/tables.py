"""The evidence table: each finding of a case's analysis, linked to the case and the version it
was analysed at (migration 0006)."""

from __future__ import annotations

from sqlalchemy import Column, DateTime, ForeignKey, Index, Integer, String, Table, Text, Uuid, func

from core.db.tables import BigId, Json, metadata

evidence_link = Table(
    "evidence_link",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("case_id", Uuid(), ForeignKey("ops_case.id"), nullable=False),
    Column("case_version", Integer, nullable=False),
    Column("kind", String(32), nullable=False),  # "finding"
    Column("metric", String(200), nullable=False),
    Column("summary", Text, nullable=False),
    Column("url", Text),  # where a person sees the same query and window
    Column("data", Json, nullable=False),  # the finding's numbers
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_evidence_link_case_id", "case_id", "id"),
)
