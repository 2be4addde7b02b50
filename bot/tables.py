"""The Slack front end's tables on the opsgate database: the events it took and the approval ids
its buttons carry (migration 0004), and the case cards (migration 0010)."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Uuid,
    false,
    func,
)

metadata = MetaData()

slack_event = Table(
    "slack_event", metadata,
    Column("event_id", String(64), primary_key=True),
    Column("message_key", String(200), nullable=False, unique=True),
    Column("state", String(16), nullable=False),  # claimed | done
    Column("owner", String(32), nullable=False),
    Column("claimed_at", DateTime(timezone=True), nullable=False),
    Column("done_at", DateTime(timezone=True)),
)

slack_approval = Table(
    "slack_approval", metadata,
    Column("approval_id", String(40), primary_key=True),
    Column("case_id", Uuid(), nullable=False),
    Column("plan_hash", String(64), nullable=False),
    Column("case_version", Integer, nullable=False),
    Column("channel", String(32)),
    Column("message_ts", String(32)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_slack_approval_case", "case_id", "plan_hash"),
)


# -- the case card (migration 0010) -----------------------------------------------------------

slack_card = Table(
    "slack_card", metadata,
    Column("case_id", Uuid(), primary_key=True),
    Column("channel", String(32)),
    Column("message_ts", String(32)),  # NULL until the card is posted
    Column("shown", String(16)),  # digest of what the card shows
    Column("updates", Integer, nullable=False, server_default="0"),
    Column("working", String(200)),  # "… is working on it" while the agent works, else NULL
    Column("owner", String(32)),  # who renders it now (a lease until busy_until)
    Column("busy_until", DateTime(timezone=True)),
    Column("dirty", Boolean, nullable=False, server_default=false()),  # render once more
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
