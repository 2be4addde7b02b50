"""The librarian's vectors (issue 30): ``kb_vector``, one vector per passage of an indexed case or
runbook with the model that made it and its dimension; on PostgreSQL a pgvector column and an
HNSW index (created with the extension when this role may), on SQLite a float32 BLOB that
sqlite-vec compares. A PostgreSQL without pgvector gets no table and keeps recalling by words
(``core.library.vectors.create_store``, which ``opsgate library reindex`` runs again later).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import logging

from alembic import op

from core.library.vectors import create_store

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

log = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    missing = create_store(op.get_bind())
    if missing:
        log.warning("%s", missing)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS kb_vector")
