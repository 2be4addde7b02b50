"""Where each case's card is in Slack, what it shows and who is updating it (``slack_card``):
one card per case, rendered by one holder at a time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, and_, false, insert, select, update
from sqlalchemy.exc import IntegrityError

from bot.tables import slack_card
from core.clock import Clock, utcnow
from core.db.database import connection, transaction


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
