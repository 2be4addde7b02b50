"""Delivery proven end to end: an outbox row gets ``delivered_at`` once every consumer of its
topic has recorded it in its inbox (not when the bus accepted it). Rows published before this
revision count as delivered: only messages published from now on are watched.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_UNDELIVERED = "published_at IS NOT NULL AND delivered_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE outbox SET delivered_at = published_at WHERE published_at IS NOT NULL")
    op.create_index("ix_outbox_undelivered", "outbox", ["id"],
                    postgresql_where=sa.text(_UNDELIVERED), sqlite_where=sa.text(_UNDELIVERED))


def downgrade() -> None:
    op.drop_index("ix_outbox_undelivered", table_name="outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("delivered_at")
