"""What the Slack front end remembers, durably (migration 0004): Slack events already taken
(``slack_event``) and the approval ids the plan messages' buttons carry (``slack_approval``); it
reads the thread that holds each case (the core's ``chat_thread``, bound as the case opens).

Every write is its own short transaction: a claim or an adopted thread must be visible to other
replicas as soon as it returns.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Engine,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Uuid,
    and_,
    false,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from core.clock import Clock, utcnow
from core.db.database import connection, transaction
from core.db.tables import chat_thread

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


@dataclass(frozen=True)
class Thread:
    """The Slack thread of one case."""

    team: str
    channel: str
    thread_ts: str
    case_id: UUID


@dataclass(frozen=True)
class ApprovalRef:
    """What one Approve/Reject button stands for: one plan hash of one case at one version."""

    approval_id: str
    case_id: UUID
    plan_hash: str
    case_version: int
    channel: str | None
    message_ts: str | None


def approval_id_for(case_id: UUID, plan_hash: str, case_version: int) -> str:
    """The opaque id a plan message's buttons carry; the same for every post of that proposal,
    so a redelivered event renders the same message."""
    digest = hashlib.sha256(f"{case_id}|{plan_hash}|{case_version}".encode()).hexdigest()
    return f"ap_{digest[:32]}"


class SlackStore:
    """The bot's tables on the opsgate database."""

    def __init__(self, engine: Engine, *, event_lease_s: float = 120.0,
                 clock: Clock = utcnow) -> None:
        self.engine = engine
        self.event_lease_s = event_lease_s
        self.clock = clock  # an event claim's lease runs on it

    # -- events: durable dedup of Slack's retries ---------------------------------------------

    def claim_event(self, event_id: str, message_key: str) -> str | None:
        """The owner token when this delivery should do the event's work, else None: the event
        (or another event about the same message) is done, or taken by someone whose claim is
        younger than the lease. A claim older than the lease belonged to an attempt that died,
        so a retry takes it over."""
        owner, now = uuid.uuid4().hex, self.clock()
        row = {"event_id": event_id, "message_key": message_key, "state": "claimed",
               "owner": owner, "claimed_at": now}
        try:
            with transaction(self.engine) as conn:
                conn.execute(insert(slack_event).values(**row))
            return owner
        except IntegrityError:
            pass
        with transaction(self.engine) as conn:
            found = conn.execute(select(slack_event).where(or_(
                slack_event.c.event_id == event_id,
                slack_event.c.message_key == message_key))).mappings().first()
            if found is None or found["state"] == "done":
                return None
            stale = now - timedelta(seconds=self.event_lease_s)
            taken = conn.execute(
                update(slack_event)
                .where(and_(slack_event.c.event_id == found["event_id"],
                            slack_event.c.owner == found["owner"],
                            slack_event.c.state == "claimed",
                            slack_event.c.claimed_at < stale))
                .values(owner=owner, claimed_at=now))
            return owner if taken.rowcount == 1 else None

    def finish_event(self, event_id: str, message_key: str, owner: str) -> None:
        """Mark the event done (by whichever row the claim went to)."""
        with transaction(self.engine) as conn:
            conn.execute(update(slack_event)
                         .where(and_(or_(slack_event.c.event_id == event_id,
                                         slack_event.c.message_key == message_key),
                                     slack_event.c.owner == owner))
                         .values(state="done", done_at=utcnow()))

    # -- threads --------------------------------------------------------------------------

    def adopt_thread(self, team: str, channel: str, thread_ts: str, case_id: UUID) -> None:
        """Record a thread the bot started itself for a case opened elsewhere (REST, alerts)."""
        try:
            with transaction(self.engine) as conn:
                conn.execute(insert(chat_thread).values(
                    team=team, channel=channel, thread_ts=thread_ts, case_id=case_id,
                    created_at=utcnow()))
        except IntegrityError:
            pass  # another replica adopted first; its thread wins

    def case_of_thread(self, team: str, channel: str, thread_ts: str) -> UUID | None:
        with connection(self.engine) as conn:
            found = conn.execute(select(chat_thread.c.case_id).where(and_(
                chat_thread.c.team == team, chat_thread.c.channel == channel,
                chat_thread.c.thread_ts == thread_ts))).scalar_one_or_none()
        return found if isinstance(found, UUID) else None

    def thread_of_case(self, case_id: UUID) -> Thread | None:
        with connection(self.engine) as conn:
            row = conn.execute(select(chat_thread)
                               .where(chat_thread.c.case_id == case_id)).mappings().first()
        return None if row is None else _thread(row)

    # -- approvals ------------------------------------------------------------------------

    def save_approval(self, case_id: UUID, plan_hash: str, case_version: int) -> str:
        approval_id = approval_id_for(case_id, plan_hash, case_version)
        try:
            with transaction(self.engine) as conn:
                conn.execute(insert(slack_approval).values(
                    approval_id=approval_id, case_id=case_id, plan_hash=plan_hash,
                    case_version=case_version, created_at=utcnow()))
        except IntegrityError:
            pass  # the same proposal rendered again
        return approval_id

    def place_approval(self, approval_id: str, channel: str, message_ts: str) -> None:
        """Where the plan message carrying ``approval_id`` was posted (``chat.update`` needs it)."""
        with transaction(self.engine) as conn:
            conn.execute(update(slack_approval)
                         .where(slack_approval.c.approval_id == approval_id)
                         .values(channel=channel, message_ts=message_ts))

    def approval(self, approval_id: str) -> ApprovalRef | None:
        with connection(self.engine) as conn:
            row = conn.execute(select(slack_approval).where(
                slack_approval.c.approval_id == approval_id)).mappings().first()
        return None if row is None else _approval(row)

    def approval_of_plan(self, case_id: UUID, plan_hash: str) -> ApprovalRef | None:
        """The latest posted plan message for ``plan_hash`` of the case."""
        with connection(self.engine) as conn:
            row = conn.execute(
                select(slack_approval)
                .where(and_(slack_approval.c.case_id == case_id,
                            slack_approval.c.plan_hash == plan_hash,
                            slack_approval.c.message_ts.is_not(None)))
                .order_by(slack_approval.c.case_version.desc()).limit(1)).mappings().first()
        return None if row is None else _approval(row)


def _thread(row: Mapping[Any, Any]) -> Thread:
    return Thread(row["team"], row["channel"], row["thread_ts"], row["case_id"])


def _approval(row: Mapping[Any, Any]) -> ApprovalRef:
    return ApprovalRef(row["approval_id"], row["case_id"], row["plan_hash"],
                       int(row["case_version"]), row["channel"], row["message_ts"])


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


@dataclass(frozen=True)
class Card:
    """Where a case's card is, what it shows, and who is updating it."""

    case_id: UUID
    channel: str | None
    message_ts: str | None
    shown: str | None
    updates: int
    working: str | None
    owner: str | None
    busy_until: datetime | None
    dirty: bool


class CardStore:
    """The ``slack_card`` rows: one card per case. One renderer at a time holds a card (a lease,
    so a renderer that died is taken over); a renderer that finds it held marks it ``dirty``
    and the holder renders once more before letting go. Renders are therefore sequential, each
    of the case's state when it is made: a late render never replaces a newer one."""

    def __init__(self, engine: Engine, *, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.clock = clock  # a renderer's lease on the card runs on it

    def card(self, case_id: UUID) -> Card | None:
        with connection(self.engine) as conn:
            row = conn.execute(select(slack_card).where(slack_card.c.case_id == case_id)
                               ).mappings().first()
        return None if row is None else _card(row)

    def place(self, case_id: UUID, channel: str | None, message_ts: str, shown: str) -> None:
        """Where the card was posted and what it showed (once: a later placement of the same
        case keeps the first)."""
        self._ensure(case_id)
        with transaction(self.engine) as conn:
            conn.execute(update(slack_card)
                         .where(and_(slack_card.c.case_id == case_id,
                                     slack_card.c.message_ts.is_(None)))
                         .values(channel=channel, message_ts=message_ts, shown=shown))

    def take(self, case_id: UUID, owner: str, lease_s: float) -> bool | None:
        """True when ``owner`` now holds the card; False when someone else does (and is asked
        to render once more); None when the case has no card posted yet."""
        now = self.clock()
        held = and_(slack_card.c.owner.is_not(None), slack_card.c.busy_until >= now)
        with transaction(self.engine) as conn:
            taken = conn.execute(
                update(slack_card)
                .where(and_(slack_card.c.case_id == case_id,
                            slack_card.c.message_ts.is_not(None), ~held))
                .values(owner=owner, busy_until=now + timedelta(seconds=lease_s), dirty=False))
            if taken.rowcount == 1:
                return True
            marked = conn.execute(update(slack_card)
                                  .where(and_(slack_card.c.case_id == case_id, held))
                                  .values(dirty=True))
            if marked.rowcount == 1:
                return False
            found = conn.execute(select(slack_card.c.message_ts)
                                 .where(slack_card.c.case_id == case_id)).scalar_one_or_none()
        return None if found is None else self.take(case_id, owner, lease_s)

    def showed(self, case_id: UUID, owner: str, shown: str) -> None:
        """The card now shows ``shown`` (one more update)."""
        with transaction(self.engine) as conn:
            conn.execute(update(slack_card)
                         .where(and_(slack_card.c.case_id == case_id,
                                     slack_card.c.owner == owner))
                         .values(shown=shown, updates=slack_card.c.updates + 1))

    def release(self, case_id: UUID, owner: str) -> bool:
        """Let go of the card: True when done, False when someone asked for one more render
        meanwhile (``owner`` keeps the card and renders again)."""
        with transaction(self.engine) as conn:
            done = conn.execute(update(slack_card)
                                .where(and_(slack_card.c.case_id == case_id,
                                            slack_card.c.owner == owner,
                                            slack_card.c.dirty == false()))
                                .values(owner=None, busy_until=None))
            if done.rowcount == 1:
                return True
            again = conn.execute(update(slack_card)
                                 .where(and_(slack_card.c.case_id == case_id,
                                             slack_card.c.owner == owner))
                                 .values(dirty=False))
        return again.rowcount == 0  # lost the lease meanwhile: the new holder renders

    def abandon(self, case_id: UUID, owner: str) -> None:
        """Let go after a failed update; the card stays ``dirty`` for whoever renders next."""
        with transaction(self.engine) as conn:
            conn.execute(update(slack_card)
                         .where(and_(slack_card.c.case_id == case_id,
                                     slack_card.c.owner == owner))
                         .values(owner=None, busy_until=None, dirty=True))

    def set_working(self, case_id: UUID, line: str | None) -> None:
        """Say (or, with None, stop saying) on the card that the agent is working."""
        self._ensure(case_id)
        with transaction(self.engine) as conn:
            conn.execute(update(slack_card).where(slack_card.c.case_id == case_id)
                         .values(working=None if line is None else line[:200]))

    def _ensure(self, case_id: UUID) -> None:
        try:
            with transaction(self.engine) as conn:
                conn.execute(insert(slack_card).values(case_id=case_id, updates=0, dirty=False,
                                                       created_at=utcnow()))
        except IntegrityError:
            pass  # the case has its row already


def _card(row: Mapping[Any, Any]) -> Card:
    busy = row["busy_until"]
    if busy is not None and busy.tzinfo is None:
        busy = busy.replace(tzinfo=UTC)  # SQLite keeps no zone
    return Card(row["case_id"], row["channel"], row["message_ts"], row["shown"],
                int(row["updates"]), row["working"], row["owner"], busy, bool(row["dirty"]))
