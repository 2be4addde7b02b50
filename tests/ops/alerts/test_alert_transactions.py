"""What a first Alertmanager notification costs the database: the transactions committed from
the webhook's arrival to its reply: the group's alerts recorded, the case opened, and its opening
note with the alerts' evidence and the group naming its case."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event

from core.alerts.intake import AlertIntake
from core.alerts.model import Notification
from core.bootstrap import App
from tests.support.alerts import alert, alerts_app, notification


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


def test_a_first_notification_commits_three_transactions(app: App, engine: Engine) -> None:
    note = Notification.model_validate(notification("ProbeFailure", [
        alert("ProbeFailure", "a"), alert("ProbeFailure", "b")]))
    intake = AlertIntake(app.engine, app.cases)
    assert commits_during(engine, lambda: intake.receive(note)) == 3
