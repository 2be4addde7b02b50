"""API principals: who a REST or MCP caller is. Each row is one named token (``opsgate token
create``) with its role and, for a person, the Slack user id it links; only the token's SHA-256
is kept.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_principal",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("slack_user", sa.String(length=64), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_principal")),
        sa.UniqueConstraint("name", name=op.f("uq_api_principal_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_principal_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("api_principal")
