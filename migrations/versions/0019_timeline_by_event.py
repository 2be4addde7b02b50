"""A case's timeline read by event (issue 43): the gate, the consumers and the card read only
the rows of the events they judge (the moves that failed a plan, a step's results, the last
alerts), through ``(case_id, event, id)``, so their cost does not grow with an alert group's
thousands of notes on the same case.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_case_timeline_case_event", "case_timeline", ["case_id", "event", "id"])


def downgrade() -> None:
    op.drop_index("ix_case_timeline_case_event", table_name="case_timeline")
