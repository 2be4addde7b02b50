"""An alert group's life over its cases, on both databases: new alerts in an open case are one
note each, a group firing after its case CLOSED opens a second case naming the first, old
notifications repeated or reordered change nothing, concurrent deliveries of one recurrence
open one case, and every noted alert is evidence with its graph link (credentials stripped)."""

from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from bot.mrkdwn import drawn
from core.alerts.intake import AlertIntake
from core.alerts.model import Notification
from core.analysis.tables import evidence_link
from core.bootstrap import App
from core.consumers.notifier import Notifier, render
from core.db.tables import alert_seen, case_timeline, ops_case, outbox
from core.domain.fsm import CaseStatus
from core.domain.messages import Topic
from core.loop import InProcessLoop
from tests.support.alerts import TOKEN, alert, notification, post
from tests.support.cases import PATH_TO, command, key

FIRST, SECOND = "2026-11-23T05:00:00.000Z", "2026-11-24T09:00:00.000Z"
RESOLVED_AT = {FIRST: "2026-11-23T05:30:00.000Z", SECOND: "2026-11-24T09:30:00.000Z"}
TITLE = "ProbeFailure: ProbeFailure on checkout"


def sent(instance: str, starts: str = FIRST, *, resolved: bool = False) -> dict[str, Any]:
    """One alert of the ProbeFailure group, firing (or resolved) since ``starts``."""
    body = alert("ProbeFailure", instance, resolved=resolved)
    body["startsAt"] = starts
    if resolved:
        body["endsAt"] = RESOLVED_AT[starts]
    return body


def group(*alerts: dict[str, Any]) -> dict[str, Any]:
    return notification("ProbeFailure", list(alerts))


@pytest.fixture
def app_options() -> dict[str, Any]:
    return {"alert_token": TOKEN}


def deliver(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    reply = post(client, body)
    assert reply.status_code == 200, reply.text
    return dict(reply.json()["data"])


def close(app: App, case_id: UUID) -> None:
    """Moves the case through the FSM to CLOSED, as its plan would."""
    for event in PATH_TO[CaseStatus.CLOSED]:
        reply = app.cases.transition(command(case_id, event), key())
        assert reply.ok, reply.body
    assert app.cases.get_case(case_id)["status"] == CaseStatus.CLOSED


def cases(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(select(ops_case).order_by(ops_case.c.created_at))
                .mappings()]


def alert_notes(engine: Engine, case_id: Any = None) -> list[dict[str, Any]]:
    query = select(case_timeline).where(case_timeline.c.event.like("alert_%"))
    if case_id is not None:
        query = query.where(case_timeline.c.case_id == UUID(str(case_id)))
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query.order_by(case_timeline.c.id)).mappings()]


def thread_lines(engine: Engine, case_id: Any) -> list[str]:
    """What the thread shows of the case's alert events (their outbox rows, as the bot draws
    the core's words)."""
    query = select(outbox.c.payload).where(outbox.c.topic == Topic.ALERT_NOTED,
                                           outbox.c.key == str(case_id)).order_by(outbox.c.id)
    with engine.connect() as conn:
        return [drawn(render(Topic.ALERT_NOTED, p) or ()) for p in conn.execute(query).scalars()]


def state(engine: Engine) -> dict[str, Any]:
    """The end state: each case with its alert notes and evidence, as order-free facts."""
    with engine.connect() as conn:
        evidence = conn.execute(select(evidence_link.c.case_id, evidence_link.c.data)).all()
    by_case: dict[str, Any] = {}
    for number, case in enumerate(cases(engine), start=1):
        notes = alert_notes(engine, case["id"])
        fired = sorted(a["fingerprint"] for n in notes if n["event"] != "alert_resolved"
                       for a in n["meta"]["context"].get("alerts", [n["meta"]["context"]]))
        by_case[f"case {number}"] = {
            "title": case["title"],
            "fired": fired,
            "resolved": sorted(n["reason"] for n in notes if n["event"] == "alert_resolved"),
            "recurrence": sorted(
                n["reason"].replace(n["meta"]["context"]["previous_case_id"], "<previous>")
                for n in notes if n["event"] == "alert_recurrence"),
            "evidence": sorted((d["fingerprint"], d["starts_at"], d["status"], d["ends_at"])
                               for case_id, d in evidence if case_id == case["id"]),
        }
    return by_case


# -- a second case after the first closed -----------------------------------------------------


def test_a_group_firing_after_its_case_closed_opens_a_second_case_naming_the_first(app, client,
                                                                                    engine):
    first = deliver(client, group(sent("a")))
    deliver(client, group(sent("a", resolved=True)))
    close(app, UUID(first["case_id"]))

    again = deliver(client, group(sent("a", SECOND)))

    assert again["opened"] is True and again["recurrence"] == 2
    assert again["case_id"] != first["case_id"]
    old, new = cases(engine)
    assert str(old["id"]) == first["case_id"] and str(new["id"]) == again["case_id"]
    assert new["title"] == TITLE and new["status"] == "NEW"
    [recurrence] = [n for n in alert_notes(engine, new["id"])
                    if n["event"] == "alert_recurrence"]
    assert recurrence["reason"] == f"recurrence 2 of {TITLE}, previous case {old['id']}"
    assert recurrence["meta"]["context"]["previous_case_id"] == str(old["id"])
    assert recurrence["meta"]["context"]["recurrence"] == 2
    graph = "http://prometheus.example.org:9090/graph?g0.expr=probe_success+%3D%3D+0"
    assert thread_lines(engine, new["id"]) == [
        f"Recurrence 2 of {TITLE}; previous case {str(old['id'])[:8]} <{graph}|graph>"]
    assert thread_lines(engine, old["id"]) == [
        f"Firing: ProbeFailure: ProbeFailure on a <{graph}|graph>",
        f"ProbeFailure resolved: ProbeFailure on a <{graph}|graph>"]


def test_old_notifications_repeated_after_the_close_open_nothing(app, client, engine):
    old = [group(sent("a")), group(sent("a"), sent("b")),
           group(sent("a", resolved=True), sent("b", resolved=True))]
    for body in old:
        deliver(client, body)
    [case] = cases(engine)
    close(app, case["id"])
    before = state(engine)
    for body in [*old, *reversed(old)]:
        reply = deliver(client, body)
        assert reply["opened"] is False and reply["case_id"] == str(case["id"])
    assert state(engine) == before
    assert len(cases(engine)) == 1


def test_a_resolution_before_its_recurrence_fires_waits_for_the_new_case(app, client, engine):
    deliver(client, group(sent("a")))
    [old] = cases(engine)
    close(app, old["id"])
    early = deliver(client, group(sent("a", SECOND, resolved=True)))
    assert early == {**early, "case_id": None, "opened": False, "resolved_pending": 1}
    assert len(cases(engine)) == 1
    fired = deliver(client, group(sent("a", SECOND)))
    assert fired["opened"] is True
    resolved = [n for n in alert_notes(engine, fired["case_id"])
                if n["event"] == "alert_resolved"]
    assert [n["meta"]["context"]["starts_at"] for n in resolved] == [SECOND]


# -- new alerts in an open case ---------------------------------------------------------------


def test_a_new_alert_in_an_open_case_is_one_note_and_its_repeat_none(client, engine):
    deliver(client, group(sent("a")))
    [case] = cases(engine)
    added = deliver(client, group(sent("a"), sent("b")))
    repeated = deliver(client, group(sent("a"), sent("b")))
    also_new = deliver(client, group(sent("a"), sent("b"), sent("b", SECOND)))
    assert [added["new_alerts"], repeated["new_alerts"], also_new["new_alerts"]] == [1, 0, 1]
    assert len(cases(engine)) == 1
    new = [n for n in alert_notes(engine, case["id"]) if n["event"] == "alert_new"]
    assert [n["reason"] for n in new] == ["new alert in this group: ProbeFailure: ProbeFailure "
                                          "on b"] * 2
    assert [n["meta"]["context"]["starts_at"] for n in new] == [FIRST, SECOND]
    assert [n["event"] for n in alert_notes(engine, case["id"])].count("alert_firing") == 1
    assert thread_lines(engine, case["id"])[1].startswith(
        "New alert in this group: ProbeFailure: ProbeFailure on b <http://prometheus.")


# -- repeats and reorderings ------------------------------------------------------------------


def _first_incident() -> list[dict[str, Any]]:
    return [group(sent("a")), group(sent("a"), sent("b")),
            group(sent("a"), sent("b", resolved=True)),
            group(sent("a", resolved=True), sent("b", resolved=True))]


def _second_incident() -> list[dict[str, Any]]:
    return [group(sent("c", SECOND)), group(sent("c", SECOND), sent("a", SECOND)),
            group(sent("c", SECOND, resolved=True), sent("a", SECOND, resolved=True))]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_repeated_and_shuffled_notifications_end_in_the_same_cases_and_notes(app, client,
                                                                             engine, seed):
    shuffle = random.Random(seed).shuffle
    first = _first_incident() * 2
    shuffle(first)
    for body in first:
        deliver(client, body)
    [case] = cases(engine)
    close(app, case["id"])
    second = _second_incident() * 2 + _first_incident()  # late repeats of the old incident
    shuffle(second)
    for body in second:
        deliver(client, body)

    fa, fb, fc = (alert("ProbeFailure", i)["fingerprint"] for i in "abc")
    assert state(engine) == {
        "case 1": {"title": TITLE, "fired": sorted([fa, fb]),
                   "resolved": ["ProbeFailure resolved: ProbeFailure on a",
                                "ProbeFailure resolved: ProbeFailure on b"],
                   "recurrence": [],
                   "evidence": sorted([(fa, FIRST, "firing", None), (fb, FIRST, "firing", None),
                                       (fa, FIRST, "resolved", RESOLVED_AT[FIRST]),
                                       (fb, FIRST, "resolved", RESOLVED_AT[FIRST])])},
        "case 2": {"title": TITLE, "fired": sorted([fa, fc]),
                   "resolved": ["ProbeFailure resolved: ProbeFailure on a",
                                "ProbeFailure resolved: ProbeFailure on c"],
                   "recurrence": [f"recurrence 2 of {TITLE}, previous case <previous>"],
                   "evidence": sorted([(fa, SECOND, "firing", None),
                                       (fc, SECOND, "firing", None),
                                       (fa, SECOND, "resolved", RESOLVED_AT[SECOND]),
                                       (fc, SECOND, "resolved", RESOLVED_AT[SECOND])])},
    }


# -- concurrency ------------------------------------------------------------------------------


def test_concurrent_deliveries_of_one_recurrence_open_one_case(app, client, engine):
    deliver(client, group(sent("a")))
    [old] = cases(engine)
    close(app, old["id"])
    body = Notification.model_validate(group(sent("a", SECOND), sent("b", SECOND)))
    start = threading.Barrier(6)

    def receive(_: int) -> dict[str, Any]:
        start.wait(10)
        return AlertIntake(app.engine, app.cases).receive(body).as_dict()

    with ThreadPoolExecutor(max_workers=6) as pool:
        replies = list(pool.map(receive, range(6)))

    assert [r["opened"] for r in replies].count(True) == 1
    assert {r["case_id"] for r in replies} != {str(old["id"])}
    assert len({r["case_id"] for r in replies}) == 1
    assert len(cases(engine)) == 2
    new = replies[0]["case_id"]
    events = [n["event"] for n in alert_notes(engine, new)]
    assert events == ["alert_recurrence"]
    with engine.connect() as conn:
        seen = conn.execute(select(alert_seen.c.recurrence, alert_seen.c.case_id)
                            .where(alert_seen.c.starts_at == SECOND)).all()
    assert sorted(seen) == [(2, UUID(new))] * 2


# -- evidence ---------------------------------------------------------------------------------


def test_each_noted_alert_is_evidence_with_its_link_without_credentials(client, engine):
    secret = "http://admin:s3cret@prometheus.example.org:9090/graph?g0.expr=up+%3D%3D+0&g0.tab=1"
    shown = "http://prometheus.example.org:9090/graph?g0.expr=up+%3D%3D+0&g0.tab=1"
    a, b = sent("a"), sent("b")
    a["generatorURL"] = b["generatorURL"] = secret
    deliver(client, group(a))
    deliver(client, group(a, b))
    [case] = cases(engine)
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(evidence_link).order_by(evidence_link.c.id))
                .mappings()]
        stored = json.dumps([[str(v) for v in r] for table in (alert_seen, case_timeline,
                                                               outbox, evidence_link)
                             for r in conn.execute(select(table)).all()])
    assert "s3cret" not in stored and "admin" not in stored
    assert [(r["case_id"], r["kind"], r["metric"], r["url"]) for r in rows] == [
        (case["id"], "alert", "ProbeFailure", shown)] * 2
    assert rows[1]["data"]["labels"] == b["labels"]
    assert rows[1]["data"]["annotations"] == b["annotations"]
    assert rows[1]["data"]["summary"] == "ProbeFailure firing: ProbeFailure on b"
    lines = thread_lines(engine, case["id"])
    assert lines == [f"Firing: ProbeFailure: ProbeFailure on a <{shown}|graph>",
                     f"New alert in this group: ProbeFailure: ProbeFailure on b <{shown}|graph>"]


# -- the thread -------------------------------------------------------------------------------


def test_the_notifier_posts_each_alert_note_once_in_the_case_thread(app, client, engine):
    with InProcessLoop(app, consumers=[Notifier(app)]) as loop:
        for body in [group(sent("a")), group(sent("a"), sent("b")), group(sent("a"), sent("b")),
                     group(sent("a"), sent("b", resolved=True))]:
            deliver(client, body)
        [case] = cases(engine)
        posts = lambda: app.chat.thread(str(case["id"]))  # noqa: E731
        assert loop.wait_for(lambda: loop.unpublished() == 0 and len(posts()) >= 4, 30)
    # The core's words in plain text (a Slack sink draws the graph as a link: test_alert_render).
    graph = "graph (http://prometheus.example.org:9090/graph?g0.expr=probe_success+%3D%3D+0)"
    assert posts() == [f"Case opened by alertmanager: {TITLE} (SEV1)",
                       f"Firing: ProbeFailure: ProbeFailure on a {graph}",
                       f"New alert in this group: ProbeFailure: ProbeFailure on b {graph}",
                       f"ProbeFailure resolved: ProbeFailure on b {graph}"]


def test_a_wide_opening_names_twenty_alerts_and_keeps_every_one_as_evidence(client, engine):
    deliver(client, group(*(sent(f"i{n:02d}") for n in range(25))))
    [case] = cases(engine)
    [opening] = alert_notes(engine, case["id"])
    context = opening["meta"]["context"]
    assert (len(context["alerts"]), context["alert_count"]) == (20, 25)
    assert opening["reason"].endswith("; and 5 more")  # in fingerprint order
    with engine.connect() as conn:
        rows = conn.execute(select(evidence_link.c.data).where(evidence_link.c.case_id ==
                                                               case["id"])).scalars().all()
    assert sorted(d["labels"]["instance"] for d in rows) == [f"i{n:02d}" for n in range(25)]
    assert thread_lines(engine, case["id"])[0].endswith("|graph>; and 22 more")


def test_an_alert_listed_twice_in_one_notification_counts_once(client, engine):
    opened = deliver(client, group(sent("a"), sent("a"), sent("a", resolved=True)))
    assert opened["opened"] is True
    added = deliver(client, group(sent("b"), sent("b")))
    assert added["new_alerts"] == 1
    [case] = cases(engine)
    assert [n["event"] for n in alert_notes(engine, case["id"])] == [
        "alert_firing", "alert_resolved", "alert_new"]
