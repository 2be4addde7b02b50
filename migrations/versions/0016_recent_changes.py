"""Recent changes (issue 28). ``change_record``: each deploy or configuration change POSTed to
``/changes`` (opsgate's generic JSON, Argo CD's notification webhook, GitHub's
``deployment_status``), once per change id; the catalog component it resolved to when it arrived
(NULL: none, still found by its service), and a fingerprint of its content so that a retry is
recognised and a different change under the same id refused. Read newest first by component or
by service, hence the two indexes.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "change_record",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("change_id", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("service", sa.String(length=253), nullable=False),
        sa.Column("component", sa.String(length=253), nullable=True),
        sa.Column("namespace", sa.String(length=63), nullable=True),
        sa.Column("version", sa.String(length=200), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("happened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_record")),
        sa.UniqueConstraint("change_id", name=op.f("uq_change_record_change_id")),
    )
    op.create_index("ix_change_record_component_happened_at", "change_record",
                    ["component", "happened_at"])
    op.create_index("ix_change_record_service_happened_at", "change_record",
                    ["service", "happened_at"])


def downgrade() -> None:
    op.drop_index("ix_change_record_service_happened_at", table_name="change_record")
    op.drop_index("ix_change_record_component_happened_at", table_name="change_record")
    op.drop_table("change_record")
