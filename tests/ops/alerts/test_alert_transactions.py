"""What a first Alertmanager notification costs the database: the transactions committed from
the webhook's arrival to its reply: the group's alerts recorded, then the case opened together
with its opening note, the alerts' evidence and the group naming its case. The open and its note
stand or fall together: a failure in between leaves no case, and a redelivery writes both once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine, event, select

from core.alerts import intake as intake_module
from core.alerts.intake import AlertIntake
from core.alerts.model import Notification
from core.analysis.tables import evidence_link
from core.bootstrap import App
from core.cases.service import CaseService, FirstNote
from core.db.tables import alert_group, alert_seen, case_timeline, ops_case, outbox
from core.domain.commands import NoteCase, OpenCase
from tests.support.alerts import alert, alerts_app, notification


class Injected(Exception):
    """The failure a test injects between the open and its note's own rows."""


@pytest.fixture
def app(engine: Engine) -> Iterator[App]:
    made = alerts_app(engine)
    yield made
    made.close()


def commits_during(engine: Engine, work: Any) -> int:
    counted: list[object] = []
    listener = lambda conn: counted.append(conn)  # noqa: E731
    event.listen(engine, "commit", listener)
    try:
        work()
    finally:
        event.remove(engine, "commit", listener)
    return len(counted)


def probe_failure() -> Notification:
    return Notification.model_validate(notification("ProbeFailure", [
        alert("ProbeFailure", "a"), alert("ProbeFailure", "b")]))


def rows(engine: Engine) -> dict[str, Any]:
    """What the intake wrote: cases, timeline events, outbox topics, evidence, group and marks."""
    with engine.connect() as conn:
        return {
            "cases": conn.execute(select(ops_case.c.id)).scalars().all(),
            "timeline": conn.execute(select(case_timeline.c.event)
                                     .order_by(case_timeline.c.id)).scalars().all(),
            "outbox": conn.execute(select(outbox.c.topic).order_by(outbox.c.id)).scalars().all(),
            "evidence": conn.execute(select(evidence_link.c.case_id)).scalars().all(),
            "group_case": conn.execute(select(alert_group.c.case_id)).scalars().all(),
            "unnoted": conn.execute(select(alert_seen.c.fingerprint)
                                    .where(alert_seen.c.noted_at.is_(None))).scalars().all(),
        }


def assert_opened_and_noted_once(engine: Engine) -> None:
    found = rows(engine)
    assert len(found["cases"]) == 1
    assert found["timeline"] == ["case_opened", "alert_firing"]
    assert found["outbox"] == ["evt.case.opened.v1", "evt.alert.noted.v1"]
    assert found["evidence"] == found["cases"] * 2
    assert found["group_case"] == found["cases"]
    assert found["unnoted"] == []


def test_a_first_notification_commits_two_transactions(app: App, engine: Engine) -> None:
    intake = AlertIntake(app.engine, app.cases)
    assert commits_during(engine, lambda: intake.receive(probe_failure())) == 2
    assert_opened_and_noted_once(engine)


def test_a_failure_in_the_opening_note_leaves_no_case_and_a_redelivery_writes_both(
        app: App, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: Any, **_kwargs: Any) -> None:
        raise Injected

    intake = AlertIntake(app.engine, app.cases)
    with monkeypatch.context() as patched:
        patched.setattr(intake_module, "write_evidence", fail)
        with pytest.raises(Injected):
            intake.receive(probe_failure())
    found = rows(engine)
    assert (found["cases"], found["timeline"], found["outbox"]) == ([], [], [])
    assert len(found["unnoted"]) == 2  # the alerts are recorded: their note is still to write

    intake.receive(probe_failure())
    assert_opened_and_noted_once(engine)


def test_a_case_opened_without_its_note_gets_it_from_the_next_delivery(
        app: App, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case opened before the open and its note shared a transaction, whose note was lost:
    the open's key replays and the note is written under its own key."""
    plain_open = app.cases.open_case

    def open_then_crash(cmd: OpenCase, key: str, *, note: FirstNote | None = None) -> Any:
        plain_open(cmd, key)
        raise Injected

    intake = AlertIntake(app.engine, app.cases)
    with monkeypatch.context() as patched:
        patched.setattr(app.cases, "open_case", open_then_crash)
        with pytest.raises(Injected):
            intake.receive(probe_failure())
    assert rows(engine)["timeline"] == ["case_opened"]

    reply = intake.receive(probe_failure())
    assert not reply.opened
    assert_opened_and_noted_once(engine)


def test_a_repeated_open_replays_its_first_note_with_it(app: App, engine: Engine) -> None:
    cases: CaseService = app.cases

    def first(case_id: Any) -> NoteCase:
        return NoteCase(case_id, "alert_firing", "alertmanager", reason="firing",
                        topic="evt.alert.noted.v1")

    written: list[Any] = []
    note = FirstNote("open-1:note", first, lambda _conn, case_id: written.append(case_id))
    opened = cases.open_case(OpenCase("db down", "alertmanager"), "open-1", note=note)
    again = cases.open_case(OpenCase("db down", "alertmanager"), "open-1", note=note)
    alone = cases.note(first(UUID(opened.data()["case_id"])), "open-1:note")

    assert (opened.replayed, again.replayed, alone.replayed) == (False, True, True)
    assert again.body == opened.body
    assert [str(c) for c in written] == [opened.data()["case_id"]]
    found = rows(engine)
    assert found["timeline"] == ["case_opened", "alert_firing"]
    assert found["outbox"] == ["evt.case.opened.v1", "evt.alert.noted.v1"]
