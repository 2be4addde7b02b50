"""The lag a relay's and a consume process's heartbeat report, on SQLite and PostgreSQL: how long
the oldest due outbox row has waited for a relay, and how long the oldest published message of
the process's consumers' topics has waited for one of them to record it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, insert

from core.db.tables import outbox
from core.loop_processes import consumers_lag_s, relay_lag_s
from core.messaging import inbox
from core.messaging.envelope import Envelope

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class Named:
    def __init__(self, name: str, topics: tuple[str, ...]) -> None:
        self.name, self.topics = name, topics

    def handle(self, delivery: object) -> None:
        raise AssertionError("never handled here")


def row(engine: Engine, topic: str, *, written_ago_s: float,
        published_ago_s: float | None = None, deliver_in_s: float | None = None) -> int:
    values = {"topic": topic, "key": "case-1", "payload": {},
              "created_at": NOW - timedelta(seconds=written_ago_s)}
    if published_ago_s is not None:
        values["published_at"] = NOW - timedelta(seconds=published_ago_s)
    if deliver_in_s is not None:
        values["deliver_after"] = NOW + timedelta(seconds=deliver_in_s)
    with engine.begin() as conn:
        return int(conn.execute(insert(outbox).values(**values).returning(outbox.c.id))
                   .scalar_one())


def test_relay_lag_is_the_oldest_due_row_waiting(engine):
    assert relay_lag_s(engine, NOW) == 0.0
    row(engine, "evt.a", written_ago_s=500, published_ago_s=499)
    row(engine, "evt.a", written_ago_s=90, deliver_in_s=60)  # not due yet: no lag
    assert relay_lag_s(engine, NOW) == 0.0
    row(engine, "evt.a", written_ago_s=42)
    row(engine, "evt.a", written_ago_s=7)
    assert relay_lag_s(engine, NOW) == 42.0


def test_consumers_lag_is_the_oldest_message_of_their_topics_they_have_not_recorded(engine):
    executor, notifier = Named("executor", ("cmd.exec.run",)), Named("notifier", ("evt.x",))
    assert consumers_lag_s(engine, [executor, notifier], NOW) == 0.0
    recorded = row(engine, "cmd.exec.run", written_ago_s=300, published_ago_s=300)
    row(engine, "evt.x", written_ago_s=30, published_ago_s=25)
    row(engine, "evt.other", written_ago_s=900, published_ago_s=900)  # nobody here reads it
    with engine.begin() as conn:
        inbox.bury(conn, "executor", Envelope(recorded, "cmd.exec.run", "case-1", {}), "no", 4)
    assert consumers_lag_s(engine, [executor], NOW) == 0.0
    # From when it was due (written), not from its publication: a re-send resets nothing.
    assert consumers_lag_s(engine, [executor, notifier], NOW) == 30.0
