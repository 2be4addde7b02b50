"""The chat thread of a case (``chat_thread``) is written by the case service in the transaction
that opens the case, so a thread always names its case: ``case_id`` is NOT NULL and refers to
``ops_case``. It replaces ``slack_thread``, whose rows were reserved first (``case_id`` NULL) and
bound after the case committed; bound rows are kept, reservations that never got their case are
dropped (a retry of their mention opens the case with its thread).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_COLUMNS = "team, channel, thread_ts, case_id, created_at"


def upgrade() -> None:
    op.create_table(
        "chat_thread",
        sa.Column("team", sa.String(length=32), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("thread_ts", sa.String(length=32), nullable=False),
        sa.Column("case_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["ops_case.id"],
                                name=op.f("fk_chat_thread_case_id_ops_case")),
        sa.PrimaryKeyConstraint("team", "channel", "thread_ts", name=op.f("pk_chat_thread")),
        sa.UniqueConstraint("case_id", name=op.f("uq_chat_thread_case_id")),
    )
    op.execute(f"INSERT INTO chat_thread ({_COLUMNS}) SELECT {_COLUMNS} FROM slack_thread "
               "WHERE case_id IN (SELECT id FROM ops_case)")
    op.drop_table("slack_thread")


def downgrade() -> None:
    op.create_table(
        "slack_thread",
        sa.Column("team", sa.String(length=32), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("thread_ts", sa.String(length=32), nullable=False),
        sa.Column("case_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("team", "channel", "thread_ts", name=op.f("pk_slack_thread")),
        sa.UniqueConstraint("case_id", name=op.f("uq_slack_thread_case_id")),
    )
    op.execute(f"INSERT INTO slack_thread ({_COLUMNS}) SELECT {_COLUMNS} FROM chat_thread")
    op.drop_table("chat_thread")
