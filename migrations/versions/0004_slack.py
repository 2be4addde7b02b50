"""Slack front end: which Slack thread holds each case, Slack event ids already taken (durable
dedup of retries), and the approval ids the plan messages' buttons carry. Owned by the Slack bot
issue (6).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slack_event",
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("message_key", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=32), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_slack_event")),
        sa.UniqueConstraint("message_key", name=op.f("uq_slack_event_message_key")),
    )
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
    op.create_table(
        "slack_approval",
        sa.Column("approval_id", sa.String(length=40), nullable=False),
        sa.Column("case_id", sa.Uuid(), nullable=False),
        sa.Column("plan_hash", sa.String(length=64), nullable=False),
        sa.Column("case_version", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=True),
        sa.Column("message_ts", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("approval_id", name=op.f("pk_slack_approval")),
    )
    op.create_index("ix_slack_approval_case", "slack_approval", ["case_id", "plan_hash"])


def downgrade() -> None:
    op.drop_index("ix_slack_approval_case", table_name="slack_approval")
    op.drop_table("slack_approval")
    op.drop_table("slack_thread")
    op.drop_table("slack_event")
