"""A principal's scope: the chat channels whose cases it may read and write (``opsgate token
create NAME --channel C…``), as ``{"channels": [...]}``. NULL, every existing principal's, is
today's behaviour: every case.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_principal") as batch:
        batch.add_column(sa.Column("scope", sa.JSON().with_variant(postgresql.JSONB(),
                                                                   "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_principal") as batch:
        batch.drop_column("scope")
