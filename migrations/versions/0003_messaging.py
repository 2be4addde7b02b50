"""Messaging: consumers' inbox and dead letters; on PostgreSQL, NOTIFY the relay when outbox rows
commit (a statement trigger, so a transition pays no extra round trip).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

NOTIFY_FUNCTION = """
CREATE OR REPLACE FUNCTION opsgate_outbox_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('opsgate_outbox', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""
NOTIFY_TRIGGER = """
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
FOR EACH STATEMENT EXECUTE FUNCTION opsgate_outbox_notify()
"""


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column("consumer", sa.String(length=64), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("processed_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("consumer", "message_id", name=op.f("pk_inbox")),
    )
    op.create_table(
        "dead_letter",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("consumer", sa.String(length=64), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("topic", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.Column("requeued_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dead_letter")),
    )
    op.create_index("ix_dead_letter_consumer", "dead_letter", ["consumer", "message_id"],
                    unique=True)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(NOTIFY_FUNCTION)
        op.execute(NOTIFY_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS outbox_notify ON outbox")
        op.execute("DROP FUNCTION IF EXISTS opsgate_outbox_notify()")
    op.drop_index("ix_dead_letter_consumer", table_name="dead_letter")
    op.drop_table("dead_letter")
    op.drop_table("inbox")
