"""Alert lifecycle: an alert group's case may close and the group fire again, opening its next
case (``alert_group.recurrence``, ``previous_case_id``); ``alert_seen`` records each alert
(fingerprint + startsAt) of a group once, with the recurrence it belongs to and which of its
notes are written. Resolutions kept in ``alert_group.pending`` (0005) move to ``alert_seen``.
Owned by the alerts issue (12).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("alert_group") as batch:
        batch.add_column(sa.Column("recurrence", sa.Integer(), server_default="1",
                                   nullable=False))
        batch.add_column(sa.Column("previous_case_id", sa.Uuid(), nullable=True))
        batch.create_foreign_key(op.f("fk_alert_group_previous_case_id_ops_case"), "ops_case",
                                 ["previous_case_id"], ["id"])
    op.create_table(
        "alert_seen",
        sa.Column("group_key_hash", sa.String(length=64), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("starts_at", sa.String(length=64), nullable=False),
        sa.Column("recurrence", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        # No foreign key: PostgreSQL's key-share check would wait on a case locked by a note
        # that waits on this row (cases are never deleted).
        sa.Column("case_id", sa.Uuid(), nullable=True),
        sa.Column("alert", JSON, nullable=False),
        sa.Column("ends_at", sa.String(length=64), nullable=True),
        sa.Column("noted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_noted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.ForeignKeyConstraint(["group_key_hash"], ["alert_group.group_key_hash"],
                                name=op.f("fk_alert_seen_group_key_hash_alert_group")),
        sa.PrimaryKeyConstraint("group_key_hash", "fingerprint", "starts_at",
                                name=op.f("pk_alert_seen")),
    )
    op.create_index("ix_alert_seen_recurrence", "alert_seen", ["group_key_hash", "recurrence"])
    _move_pending()


def _move_pending() -> None:
    """A group that had not opened its case kept early resolutions in ``pending``: they become
    resolved-only ``alert_seen`` rows of its first recurrence, noted when its case opens (those
    of a group with a case were noted already)."""
    bind = op.get_bind()
    groups = sa.table("alert_group", sa.column("group_key_hash", sa.String()),
                      sa.column("case_id", sa.Uuid()), sa.column("pending", JSON))
    seen = sa.table("alert_seen", *(sa.column(name) for name in (
        "group_key_hash", "fingerprint", "starts_at", "recurrence", "role")),
        sa.column("alert", JSON), sa.column("ends_at", sa.String()))
    waiting = bind.execute(sa.select(groups.c.group_key_hash, groups.c.pending)
                           .where(groups.c.case_id.is_(None))).all()
    rows = {(digest, str(item.get("fingerprint", ""))[:64]): {
        "group_key_hash": digest, "fingerprint": str(item.get("fingerprint", ""))[:64],
        "starts_at": "", "recurrence": 1, "role": "resolved",
        "ends_at": str(item.get("ends_at", ""))[:64],
        "alert": {"labels": {"alertname": item.get("alertname", "alert")},
                  "annotations": {"summary": item.get("summary", "")}, "url": None}}
        for digest, pending in waiting for item in (pending or [])}
    if rows:
        bind.execute(sa.insert(seen), list(rows.values()))


def downgrade() -> None:
    op.drop_index("ix_alert_seen_recurrence", table_name="alert_seen")
    op.drop_table("alert_seen")
    with op.batch_alter_table("alert_group") as batch:
        batch.drop_constraint(op.f("fk_alert_group_previous_case_id_ops_case"),
                              type_="foreignkey")
        batch.drop_column("previous_case_id")
        batch.drop_column("recurrence")
