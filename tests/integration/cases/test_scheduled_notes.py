"""A note that schedules a command (a verification's next reading): one transaction writes the
timeline row, the event and the scheduled row; the relay holds that row until it is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from sqlalchemy import select

from core.db.case_store import as_utc
from core.db.tables import outbox
from core.domain.commands import NoteCase, Scheduled
from core.messaging.bus import InProcessBus
from core.messaging.relay import OutboxRelay
from tests.support.cases import open_case


def rows(engine, case_id):
    with engine.connect() as conn:
        return list(conn.execute(select(outbox).where(outbox.c.key == str(case_id))
                                 .order_by(outbox.c.id)).mappings())


def test_a_note_schedules_its_command_in_the_same_write_and_a_replay_adds_nothing(
        service, engine):
    case_id = open_case(service)
    later = datetime.now(UTC) + timedelta(minutes=5)
    plus_two = timezone(timedelta(hours=2))  # any zone: the row keeps the instant, in UTC
    note = NoteCase(case_id, "verify_reading", "verifier", reason="waiting",
                    meta={"reading": 1}, topic="evt.verify.waiting.v1",
                    schedule=Scheduled("cmd.verify.run", {"plan_hash": "abc", "reading": 2},
                                       later.astimezone(plus_two)))
    assert service.note(note, "note-1").ok
    before = len(rows(engine, case_id))
    assert service.note(note, "note-1").replayed
    written = rows(engine, case_id)
    assert len(written) == before

    *_, event, command = written
    assert (event["topic"], event["deliver_after"]) == ("evt.verify.waiting.v1", None)
    assert event["payload"]["reading"] == 1
    assert command["topic"] == "cmd.verify.run"
    assert as_utc(command["deliver_after"]) == later
    assert command["payload"] == {"case_id": str(case_id), "version": 0, "plan_hash": "abc",
                                  "reading": 2, "event": "verify_reading",
                                  "correlation_id": event["payload"]["correlation_id"]}
    assert [row["event"] for row in service.timeline(case_id)].count("verify_reading") == 1

    seen = []
    bus = InProcessBus()
    bus.subscribe(("cmd.verify.run",), seen.append)
    assert OutboxRelay(engine, bus, clock=lambda: later - timedelta(seconds=1)).drain() > 0
    assert seen == []
    assert OutboxRelay(engine, bus, clock=lambda: later).drain() == 1
    assert [envelope.payload["reading"] for envelope in seen] == [2]
