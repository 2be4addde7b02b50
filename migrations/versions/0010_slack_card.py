"""Slack case card: the one message per case that the bot keeps current in place
(``slack_card``): where it was posted, a digest of what it shows and how many updates it had,
the line saying the agent is working (while it works), and a short lease that lets one renderer
at a time update it (``owner``, ``busy_until``; ``dirty`` asks the holder to render once more).
Owned by the incident-thread issue (16).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slack_card",
        sa.Column("case_id", sa.Uuid(), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=True),
        sa.Column("message_ts", sa.String(length=32), nullable=True),
        sa.Column("shown", sa.String(length=16), nullable=True),
        sa.Column("updates", sa.Integer(), server_default="0", nullable=False),
        sa.Column("working", sa.String(length=200), nullable=True),
        sa.Column("owner", sa.String(length=32), nullable=True),
        sa.Column("busy_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dirty", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("case_id", name=op.f("pk_slack_card")),
    )


def downgrade() -> None:
    op.drop_table("slack_card")
