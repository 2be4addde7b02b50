"""Changes say what they changed (issue 41): ``change_record`` gains the object a change changed
(``target``: ``deployment/NAME``, ``configmap/NAME``, ``flag/KEY``, ``hpa/NAME`` or
``route/NAME``) and its values ``before`` and ``after`` as the sender said them (JSON: a version,
a ConfigMap's data, a flag's rollout). All nullable: a change recorded before, or a sender that
does not know them, has none.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

VALUE = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True),
                                                "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("change_record") as table:
        table.add_column(sa.Column("target", sa.String(length=300), nullable=True))
        table.add_column(sa.Column("before", VALUE, nullable=True))
        table.add_column(sa.Column("after", VALUE, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("change_record") as table:
        table.drop_column("after")
        table.drop_column("before")
        table.drop_column("target")
