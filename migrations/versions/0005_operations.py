"""Operations: the correlation id of each gateway call (``opsgate trace``), and Alertmanager's
alert groups, each with the one case it opened. Owned by the operations issue (8).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("tool_call_ledger") as batch:
        batch.add_column(sa.Column("correlation_id", sa.String(length=128), nullable=True))
    op.create_index("ix_tool_call_ledger_correlation_id", "tool_call_ledger",
                    ["correlation_id"])
    op.create_index("ix_case_timeline_correlation_id", "case_timeline", ["correlation_id"])
    op.create_table(
        "alert_group",
        sa.Column("group_key_hash", sa.String(length=64), nullable=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("receiver", sa.String(length=200), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("case_id", sa.Uuid(), sa.ForeignKey("ops_case.id",
                  name=op.f("fk_alert_group_case_id_ops_case")), nullable=True),
        # Resolutions that arrived before the group's case was opened (out-of-order delivery).
        sa.Column("pending", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("group_key_hash", name=op.f("pk_alert_group")),
    )


def downgrade() -> None:
    op.drop_table("alert_group")
    op.drop_index("ix_case_timeline_correlation_id", table_name="case_timeline")
    op.drop_index("ix_tool_call_ledger_correlation_id", table_name="tool_call_ledger")
    with op.batch_alter_table("tool_call_ledger") as batch:
        batch.drop_column("correlation_id")
