"""Evidence: analysis findings linked to cases (``evidence_link``) and the librarian's index
(``kb_doc``/``kb_chunk``) with full-text search: a generated tsvector column and a GIN index on
PostgreSQL, an FTS5 table kept in step by triggers on SQLite.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

PG_SEARCH = (
    "ALTER TABLE kb_chunk ADD COLUMN tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', body)) STORED",
    "CREATE INDEX ix_kb_chunk_tsv ON kb_chunk USING gin (tsv)",
)
SQLITE_SEARCH = (
    "CREATE VIRTUAL TABLE kb_chunk_fts USING fts5(body, content='kb_chunk', "
    "content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER kb_chunk_fts_insert AFTER INSERT ON kb_chunk BEGIN "
    "INSERT INTO kb_chunk_fts(rowid, body) VALUES (new.id, new.body); END",
    "CREATE TRIGGER kb_chunk_fts_delete AFTER DELETE ON kb_chunk BEGIN "
    "INSERT INTO kb_chunk_fts(kb_chunk_fts, rowid, body) VALUES ('delete', old.id, old.body); "
    "END",
    "CREATE TRIGGER kb_chunk_fts_update AFTER UPDATE ON kb_chunk BEGIN "
    "INSERT INTO kb_chunk_fts(kb_chunk_fts, rowid, body) VALUES ('delete', old.id, old.body); "
    "INSERT INTO kb_chunk_fts(rowid, body) VALUES (new.id, new.body); END",
)


def _created_at() -> sa.Column[object]:
    return sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                     nullable=False)


def upgrade() -> None:
    op.create_table(
        "evidence_link",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("case_id", sa.Uuid(), nullable=False),
        sa.Column("case_version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("metric", sa.String(length=200), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("data", JSON, nullable=False),
        _created_at(),
        sa.ForeignKeyConstraint(["case_id"], ["ops_case.id"],
                                name=op.f("fk_evidence_link_case_id_ops_case")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evidence_link")),
    )
    op.create_index("ix_evidence_link_case_id", "evidence_link", ["case_id", "id"])
    op.create_table(
        "kb_doc",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("source", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("meta", JSON, nullable=False),
        _created_at(),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kb_doc")),
        sa.UniqueConstraint("source", name=op.f("uq_kb_doc_source")),
    )
    op.create_table(
        "kb_chunk",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("doc_id", BIG_ID, nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["doc_id"], ["kb_doc.id"], ondelete="CASCADE",
                                name=op.f("fk_kb_chunk_doc_id_kb_doc")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kb_chunk")),
    )
    op.create_index("ix_kb_chunk_doc_id", "kb_chunk", ["doc_id", "ordinal"])
    statements = PG_SEARCH if op.get_bind().dialect.name == "postgresql" else SQLITE_SEARCH
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS kb_chunk_fts_{trigger}")
        op.execute("DROP TABLE IF EXISTS kb_chunk_fts")
    op.drop_index("ix_kb_chunk_doc_id", table_name="kb_chunk")
    op.drop_table("kb_chunk")
    op.drop_table("kb_doc")
    op.drop_index("ix_evidence_link_case_id", table_name="evidence_link")
    op.drop_table("evidence_link")
