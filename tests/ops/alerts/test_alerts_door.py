"""No alert is lost at the door of ``POST /alerts/alertmanager``: Alertmanager drops a
notification answered 4xx, so one is refused only when sending it again could never help (wrong
token, not JSON, not the webhook's shape, beyond the documented bound), and each refusal is
counted with its reason. What alerts say is stored cleaned (NUL, lone surrogates) and cut (at a
word, with a marker) instead of refused; a database that is down answers 503, which Alertmanager
retries. The large groups as Alertmanager itself sends them are in test_alerts_real.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from core.alerts.model import ANNOTATION_MAX, LABEL_MAX, SAID_MAX, TITLE_MAX
from core.analysis.tables import evidence_link
from core.api import create_api
from core.api.alerts import ALERT_BODY_BYTES, MAX_ALERTS
from core.api.limits import MAX_BODY_BYTES
from core.db.database import make_engine
from core.db.tables import case_timeline, ops_case
from tests.support.alerts import (
    AUTH,
    TOKEN,
    alert,
    alerts_app,
    notification,
    refusals,
    refused_since,
)
from tests.support.chaos_proxy import CALM, ChaosProxy, Faults

JSON = {**AUTH, "Content-Type": "application/json"}


@pytest.fixture
def app_options() -> dict[str, Any]:
    return {"alert_token": TOKEN}


def send(client: TestClient, body: bytes, headers: dict[str, str] = JSON) -> Any:
    return client.post("/alerts/alertmanager", content=body, headers=headers)


def encoded(body: dict[str, Any]) -> bytes:
    """A notification as Alertmanager's JSON: non-ASCII escaped, as Go's encoder may do."""
    return json.dumps(body).encode("ascii")


def cases(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(select(ops_case)).mappings()]


def evidence(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(select(evidence_link)).mappings()]


def firing_note(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(select(case_timeline)
                                 .where(case_timeline.c.event == "alert_firing")).mappings().one())


# -- what alerts say is stored, never refused -------------------------------------------------


def test_nul_and_lone_surrogates_are_replaced_and_the_group_opens_its_case(client, engine):
    """PostgreSQL refuses NUL in text and JSONB, and a lone surrogate is no UTF-8 at all: today
    that notification was a 500 on every delivery and its group never opened a case."""
    probe = alert("ProbeFailure", "a")
    probe["labels"]["instance"] = "checkout-\ud800-1"
    probe["annotations"]["description"] = "probe\u0000failed\u0000twice"
    body = notification("ProbeFailure", [probe])
    body["commonAnnotations"]["summary"] = "probe \u0000 failed"
    reply = send(client, encoded(body))
    assert reply.status_code == 200, reply.text
    assert reply.json()["data"]["opened"] is True
    [case] = cases(engine)
    assert case["title"] == "ProbeFailure: probe \ufffd failed"
    [kept] = evidence(engine)
    assert kept["data"]["annotations"]["description"] == "probe\ufffdfailed\ufffdtwice"
    assert kept["data"]["labels"]["instance"] == "checkout-\ufffd-1"


def test_oversized_text_is_cut_at_a_word_with_a_marker_where_it_is_stored(client, engine):
    """A 200,000-character description of multi-byte words, a 5,000-character label and long
    summaries: taken, each kept within its budget, cut between words, never inside a character;
    the evidence says how much was cut, the title and the note's line end in an ellipsis."""
    words = "le café ☕ brûle 🔥 "
    description = (words * (200_000 // len(words)))
    long_alert = alert("DiskFull", "db-1")
    long_alert["annotations"] = {"summary": "disk full " * 100, "description": description}
    long_alert["labels"]["volume"] = "v" * 5_000
    body = notification("DiskFull", [long_alert])
    body["commonAnnotations"] = {"summary": "the data volume of db-1 is nearly full " * 20}
    raw = json.dumps(body, ensure_ascii=False).encode("utf-8")
    assert len(raw) > MAX_BODY_BYTES  # what every other endpoint refuses
    reply = send(client, raw)
    assert reply.status_code == 200, reply.text

    [kept] = evidence(engine)
    stored = kept["data"]["annotations"]["description"]
    head, _, marker = stored.rpartition("… [")
    assert len(stored) <= ANNOTATION_MAX
    assert marker == f"{len(description) - len(head):,} characters cut]"
    assert description.startswith(head) and description[len(head)] == " "  # cut at a word
    stored.encode("utf-8")  # whole characters only
    assert kept["data"]["labels"]["volume"].endswith("characters cut]")
    assert len(kept["data"]["labels"]["volume"]) <= LABEL_MAX

    [case] = cases(engine)
    said = firing_note(engine)["meta"]["context"]["alerts"][0]["summary"]
    for line, limit, whole in ((case["title"], TITLE_MAX,
                                "DiskFull: " + body["commonAnnotations"]["summary"]),
                               (said, SAID_MAX, long_alert["annotations"]["summary"])):
        assert len(line) <= limit and line.endswith("…")
        assert whole.startswith(line[:-1]) and whole[len(line) - 1] == " "  # cut at a word


# -- refused only when a retry could never help, and counted ---------------------------------


NOT_WEBHOOK = encoded({**notification("ProbeFailure", [alert("ProbeFailure", "a")]),
                       "version": "3"})


@pytest.mark.parametrize(("body", "headers", "status", "reason"), [
    (encoded(notification("ProbeFailure", [alert("ProbeFailure", "a")])),
     {"Authorization": "Bearer wrong", "Content-Type": "application/json"}, 401, "unauthorized"),
    (b'{"version": "4", "alerts": [', JSON, 422, "not_json"),
    (b'{"version": "4", "groupKey": "\xff\xfe"}', JSON, 400, "not_json"),
    (NOT_WEBHOOK, JSON, 422, "not_webhook"),
    (b"[]", JSON, 422, "not_webhook"),
], ids=["wrong-token", "truncated-json", "not-utf8", "version-3", "array"])
def test_a_notification_no_retry_could_help_is_4xx_and_counted_with_its_reason(
        client, engine, body, headers, status, reason):
    before = refusals(client)
    reply = send(client, body, headers)
    assert reply.status_code == status, reply.text
    assert refused_since(client, before) == {reason: 1.0}
    assert cases(engine) == []


def test_a_body_beyond_the_bound_is_413_counted_and_other_endpoints_keep_64_kib(client, engine):
    before = refusals(client)
    huge = b'{"version": "4", "pad": "' + b"x" * ALERT_BODY_BYTES + b'"}'
    reply = send(client, huge)
    assert reply.status_code == 413
    assert "max_alerts" in reply.json()["error"]["message"]

    many = {**notification("Storm", []), "alerts": [{"status": "firing"}] * (MAX_ALERTS + 1)}
    reply = send(client, encoded(many))
    assert reply.status_code == 413
    assert reply.json()["error"]["details"] == {"limit": MAX_ALERTS}
    assert refused_since(client, before) == {"too_large": 2.0}

    over = json.dumps({"title": "x" * MAX_BODY_BYTES}).encode()
    reply = client.post("/case", content=over, headers={"Idempotency-Key": "big-case",
                                                        "Content-Type": "application/json"})
    assert reply.status_code == 413
    assert reply.json()["error"]["details"] == {"limit": MAX_BODY_BYTES}
    assert refused_since(client, before) == {"too_large": 2.0}  # not an alert: not counted
    assert cases(engine) == []


# -- a transient failure is a 5xx, which Alertmanager retries --------------------------------


def test_a_database_that_is_down_answers_503_and_the_retry_opens_the_case(pg_engine):
    """PostgreSQL behind a proxy that refuses every new connection: the notification is a 503
    (counted as unavailable), and the same notification sent again once it is back opens the
    group's case."""
    body = encoded(notification("ProbeFailure", [alert("ProbeFailure", "a")]))
    with ChaosProxy(pg_engine.url.port or 5432, seed=23, time_limit_s=60) as proxy:
        engine = make_engine(pg_engine.url.set(port=proxy.port)
                             .render_as_string(hide_password=False), pool_size=2)
        app = alerts_app(engine)
        try:
            with TestClient(create_api(app), base_url="http://localhost") as client:
                before = refusals(client)
                proxy.faults = Faults(refuse=1.0)
                engine.dispose()  # pooled connections gone: the next one meets the outage
                down = send(client, body)
                assert down.status_code == 503, down.text
                assert down.json()["error"]["code"] == "unavailable"
                assert refused_since(client, before) == {"unavailable": 1.0}

                proxy.faults = CALM
                again = send(client, body)
                assert again.status_code == 200, again.text
                assert again.json()["data"]["opened"] is True
        finally:
            app.close()
            engine.dispose()
    assert [case["title"] for case in cases(pg_engine)] == ["ProbeFailure: ProbeFailure on "
                                                            "checkout"]
