"""``POST /alerts/alertmanager``: Alertmanager's webhook (version 4, in the documented shape)
behind its bearer token; each alert group opens at most one case whatever the duplicates and
order of its notifications; resolved alerts become one note each; a storm of 1,000 alerts over
real HTTP on 127.0.0.1 opens exactly one case per group."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from core.api import create_api
from core.db.tables import alert_group, case_timeline, ops_case
from core.loop import InProcessLoop
from tests.support.alerts import AUTH, TOKEN, alert, alerts_app, notification, post
from tests.support.peers import free_port


@pytest.fixture
def app_options() -> dict[str, Any]:
    return {"alert_token": TOKEN}


def cases(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(select(ops_case)).mappings()]


def notes(engine: Engine, event: str = "alert_resolved") -> list[dict[str, Any]]:
    with engine.connect() as conn:
        query = select(case_timeline).where(case_timeline.c.event == event)
        return [dict(row) for row in conn.execute(query).mappings()]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {TOKEN}"}])
def test_a_notification_without_the_right_token_is_401_and_opens_nothing(client, engine,
                                                                          headers):
    reply = post(client, notification("ProbeFailure", [alert("ProbeFailure", "a")]), headers)
    assert reply.status_code == 401
    assert reply.json()["error"]["code"] == "unauthorized"
    assert cases(engine) == []


def test_without_a_configured_token_every_notification_is_refused(engine):
    app = alerts_app(engine, token=None)
    try:
        with TestClient(create_api(app), base_url="http://localhost") as client:
            reply = post(client, notification("ProbeFailure", [alert("ProbeFailure", "a")]))
    finally:
        app.close()
    assert reply.status_code == 401
    assert "OPSGATE_ALERT_TOKEN" in reply.json()["error"]["message"]
    assert cases(engine) == []


def test_a_notification_that_is_not_version_4_is_422(client, engine):
    body = {**notification("ProbeFailure", [alert("ProbeFailure", "a")]), "version": "3"}
    assert post(client, body).status_code == 422
    assert cases(engine) == []


def test_a_firing_group_opens_one_case_with_its_title_and_severity(client, engine):
    reply = post(client, notification("ProbeFailure", [alert("ProbeFailure", "a")]))
    assert reply.status_code == 200
    data = reply.json()["data"]
    assert data["opened"] is True
    [case] = cases(engine)
    assert str(case["id"]) == data["case_id"]
    assert case["title"] == "ProbeFailure: ProbeFailure on checkout"
    assert case["severity"] == "SEV1" and case["status"] == "NEW"
    again = post(client, notification("ProbeFailure", [alert("ProbeFailure", "a"),
                                                       alert("ProbeFailure", "b")]))
    # b is new in the open case: one note, no second case (0009: new alerts are noted).
    assert again.json()["data"] == {**data, "opened": False, "new_alerts": 1}
    assert len(cases(engine)) == 1


def _group_story() -> list[dict[str, Any]]:
    """Three groups' notifications as Alertmanager would send them, duplicates included:
    HighLatency fires (a, then a+b), b resolves, then all resolve; ErrorBudget fires once;
    DiskFull is only ever seen resolved (its firing notification was lost)."""
    latency = [
        notification("HighLatency", [alert("HighLatency", "a", severity="warning")], "warning"),
        notification("HighLatency", [alert("HighLatency", "a", severity="warning"),
                                     alert("HighLatency", "b", severity="warning")], "warning"),
        notification("HighLatency", [alert("HighLatency", "a", severity="warning"),
                                     alert("HighLatency", "b", resolved=True,
                                           severity="warning")], "warning"),
        notification("HighLatency", [alert("HighLatency", "a", resolved=True,
                                           severity="warning"),
                                     alert("HighLatency", "b", resolved=True,
                                           severity="warning")], "warning"),
    ]
    budget = [notification("ErrorBudget", [alert("ErrorBudget", "checkout")])]
    disk = [notification("DiskFull", [alert("DiskFull", "db-1", resolved=True)])]
    return latency + budget + disk


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_duplicated_and_reordered_notifications_end_in_the_same_cases_and_notes(client,
                                                                                engine, seed):
    story = _group_story()
    sent = story + story  # every notification twice
    if seed is not None:
        random.Random(seed).shuffle(sent)
    for body in sent:
        assert post(client, body).status_code == 200
    titles = sorted(case["title"] for case in cases(engine))
    assert titles == ["ErrorBudget: ErrorBudget on checkout",
                      "HighLatency: HighLatency on checkout"]
    latency = next(c for c in cases(engine) if c["title"].startswith("HighLatency"))
    assert latency["severity"] == "SEV3"
    resolved = notes(engine)
    # a and b resolved once each, whatever came first; DiskFull has no case to note on.
    assert sorted(n["reason"] for n in resolved) == ["HighLatency resolved: HighLatency on a",
                                                     "HighLatency resolved: HighLatency on b"]
    assert {n["case_id"] for n in resolved} == {latency["id"]}
    with engine.connect() as conn:
        groups = conn.execute(select(func.count()).select_from(alert_group)).scalar_one()
    assert groups == 3


def test_the_case_is_announced_once_in_the_incident_thread(app, client, engine):
    with InProcessLoop(app) as loop:
        for _ in range(3):
            post(client, notification("ProbeFailure", [alert("ProbeFailure", "a")]))
        [case] = cases(engine)
        posts = lambda: app.chat.thread(str(case["id"]))  # noqa: E731
        assert loop.wait_for(lambda: any(p.startswith("Case opened") for p in posts()), 30)
        assert loop.wait_for(lambda: loop.unpublished() == 0, 30)
    opened = [p for p in posts() if p.startswith("Case opened")]
    assert opened == ["Case opened by alertmanager: ProbeFailure: ProbeFailure on checkout "
                      "(SEV1)"]


# -- the storm, over real HTTP ---------------------------------------------------------------


@pytest.fixture
def server(pg_engine: Engine) -> Iterator[tuple[str, Engine]]:
    app = alerts_app(pg_engine)
    port = free_port()
    config = uvicorn.Config(create_api(app), host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert uv.started, "the API did not start"
    yield f"http://127.0.0.1:{port}", pg_engine
    uv.should_exit = True
    thread.join(10)
    app.close()


def test_a_storm_of_1000_alerts_opens_exactly_one_case_per_group(server):
    """50 groups x 4 notifications x 5 alerts = 1,000 alerts in 200 requests, shuffled, from 8
    concurrent senders; each group's later notifications repeat its earlier alerts."""
    url, engine = server
    bodies = []
    for group in range(50):
        name = f"Storm{group:02d}"
        for wave in range(4):
            bodies.append(notification(name, [alert(name, f"i{wave}-{n}") for n in range(5)]))
    random.Random(8).shuffle(bodies)
    assert sum(len(b["alerts"]) for b in bodies) == 1000

    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as http:
        def send(body: dict[str, Any]) -> tuple[int, bool]:
            reply = http.post("/alerts/alertmanager", json=body)
            return reply.status_code, bool(reply.json()["data"]["opened"])

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            replies = list(pool.map(send, bodies))
        elapsed = time.monotonic() - started
    assert [status for status, _ in replies] == [200] * 200
    assert sum(1 for _, opened in replies if opened) == 50  # each group opened by one request
    storm = [c for c in cases(engine) if c["title"].startswith("Storm")]
    assert len(storm) == 50
    assert len({c["title"] for c in storm}) == 50
    print(f"storm: 1000 alerts in 200 requests took {elapsed:.2f} s")
