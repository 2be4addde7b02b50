"""What the Slack front end remembers of Slack, durably: Slack events already taken
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
from datetime import timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from bot.tables import slack_approval, slack_event
from core.clock import Clock, utcnow
from core.db.database import connection, transaction
from core.db.tables import chat_thread


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
    """The events taken, the case threads and the approval ids, on the opsgate database."""

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
