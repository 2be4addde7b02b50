"""The approval policy at the gate (issue 27). ``ops_case.components``: the catalog components
a case concerns, as a JSON list, which the policy reads to learn whose system a plan changes
(NULL, every existing case's, names none: steps with a Kubernetes target still resolve through
the catalog). ``plan_approved.policies`` and ``.policy_version``: which policies admitted each
decision and the policy set's version then (NULL on decisions recorded before).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both databases (SQLite adds and drops a column in place): a batch copy
# of ops_case would have to drop the table every other table points at.


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    op.add_column("ops_case", sa.Column("components", json, nullable=True))
    op.add_column("plan_approved", sa.Column("policies", json, nullable=True))
    op.add_column("plan_approved", sa.Column("policy_version", sa.String(64), nullable=True))


def downgrade() -> None:
    for table, column in (("plan_approved", "policy_version"), ("plan_approved", "policies"),
                          ("ops_case", "components")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
