"""Migration 0009 on both databases: groups get recurrence 1, resolutions a group kept pending
(0005) wait in ``alert_seen`` and are noted when its case opens; those of a group that had its
case were noted already and are left; the downgrade goes back to 0008."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert, select

from core.alerts.model import group_digest
from core.api import create_api
from core.db.tables import alert_group, alert_seen, case_timeline
from core.migrate import current_revision, head_revision, upgrade_engine
from tests.support.alerts import alert, alerts_app, notification, post
from tests.support.cases import open_case
from tests.support.migrations import downgrade


def legacy_group(engine: Engine, name: str, case_id: object = None) -> str:
    """An 0005 ``alert_group`` row with one resolution pending."""
    group_key = notification(name, [])["groupKey"]
    pending = [{"fingerprint": alert(name, "db-1")["fingerprint"],
                "ends_at": "2026-11-23T05:30:00.000Z", "alertname": name,
                "summary": f"{name} on db-1"}]
    columns = {c.name for c in alert_group.columns} - {"recurrence", "previous_case_id"}
    values = {"group_key_hash": group_digest(group_key), "group_key": group_key,
              "receiver": "opsgate", "title": f"{name}: {name} on checkout",
              "severity": "SEV1", "case_id": case_id, "pending": pending}
    with engine.begin() as conn:
        conn.execute(insert(alert_group)
                     .values({k: v for k, v in values.items() if k in columns}))
    return group_digest(group_key)


def test_pending_resolutions_move_to_alert_seen_and_are_noted_when_the_case_opens(engine,
                                                                                   service):
    case_id = open_case(service)  # by today's service, before the schema goes back to 0008
    downgrade(engine, "0008")
    waiting = legacy_group(engine, "DiskFull")
    noted = legacy_group(engine, "ErrorBudget", case_id=case_id)
    upgrade_engine(engine)

    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        groups = dict(conn.execute(select(alert_group.c.group_key_hash,
                                          alert_group.c.recurrence)).all())
        seen = conn.execute(select(alert_seen.c.group_key_hash, alert_seen.c.role,
                                   alert_seen.c.recurrence, alert_seen.c.ends_at)).all()
    assert groups == {waiting: 1, noted: 1}
    assert [tuple(row) for row in seen] == [(waiting, "resolved", 1,
                                             "2026-11-23T05:30:00.000Z")]

    app = alerts_app(engine)
    try:
        with TestClient(create_api(app), base_url="http://localhost") as client:
            reply = post(client, notification("DiskFull", [alert("DiskFull", "db-2")]))
    finally:
        app.close()
    assert reply.json()["data"]["opened"] is True
    with engine.connect() as conn:
        reasons = conn.execute(select(case_timeline.c.reason)
                               .where(case_timeline.c.event == "alert_resolved")).scalars()
        assert list(reasons) == ["DiskFull resolved: DiskFull on db-1"]


def test_the_downgrade_returns_to_0008_and_the_upgrade_comes_back(engine):
    downgrade(engine, "0008")
    assert current_revision(engine) == "0008"
    upgrade_engine(engine)
    assert current_revision(engine) == head_revision()
