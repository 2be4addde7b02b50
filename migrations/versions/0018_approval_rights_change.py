"""Who may approve what, audited (issue 40): ``approval_rights_change``, one row each time a
catalog, policy or directory reload adds or removes a person from an approving group, with the
groups' members before and after, the files that changed and when. ``seq`` is unique so that
of many processes seeing the same reload one records it.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "approval_rights_change",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rights_version", sa.String(length=64), nullable=False),
        sa.Column("policy_version", sa.String(length=64), nullable=False),
        sa.Column("before", JSON, nullable=False),
        sa.Column("after", JSON, nullable=False),
        sa.Column("names", JSON, nullable=False),
        sa.Column("files", JSON, nullable=False),
        sa.Column("sources", JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approval_rights_change")),
        sa.UniqueConstraint("seq", name=op.f("uq_approval_rights_change_seq")),
    )


def downgrade() -> None:
    op.drop_table("approval_rights_change")
