"""Slack front end: which Slack thread holds each case, and Slack event ids already taken (durable dedup of retries). Owned by the Slack bot issue (6).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
