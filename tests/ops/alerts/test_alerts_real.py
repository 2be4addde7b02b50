"""The whole alert chain with the real peers on 127.0.0.1: Prometheus scrapes the checkout
service and opsgate itself, a rule fires on the checkout p95, Alertmanager sends its group to
``POST /alerts/alertmanager`` with the bearer token, one case opens; when the p95 recovers,
Alertmanager's resolved notification becomes an ``alert_resolved`` note on that case. Large
groups as Alertmanager itself sends them (50 alerts with long descriptions, 10,000 alerts) are
taken whole: one case, every alert noted and kept as evidence."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.analysis.tables import evidence_link
from core.bootstrap import App, Extensions
from core.db.tables import alert_seen, case_timeline, ops_case
from tests.support.apps import ON_POSTGRES
from tests.support.peers import (
    BAD_P95_S,
    GAUGE,
    HEALTHY_P95_S,
    Alertmanager,
    MetricService,
    Prometheus,
    ScrapeJob,
    alert_rule,
    poll,
    serve_api,
)

TOKEN = "am-real-secret"
RULE = alert_rule("CheckoutSlow", f"{GAUGE} > 1", summary="checkout p95 over 1 s")


@dataclass
class Deliveries:
    """What Alertmanager's webhook deliveries looked like at the door: (bytes, status) each."""

    seen: list[tuple[int, int]] = field(default_factory=list)

    def mount(self, _app: App, api: FastAPI) -> None:
        api.add_middleware(self.middleware)  # outermost: before the API's own body limit

    def middleware(self, asgi: ASGIApp) -> ASGIApp:
        async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["path"] != "/alerts/alertmanager":
                await asgi(scope, receive, send)
                return
            size = 0

            async def counting() -> Message:
                nonlocal size
                message = await receive()
                size += len(message.get("body", b""))
                return message

            async def answering(message: Message) -> None:
                if message["type"] == "http.response.start":
                    self.seen.append((size, int(message["status"])))
                await send(message)

            await asgi(scope, counting, answering)

        return recorded


@pytest.fixture
def deliveries() -> Deliveries:
    return Deliveries()


pytestmark = ON_POSTGRES


@pytest.fixture
def app_options(deliveries: Deliveries) -> dict[str, Any]:
    return {"alert_token": TOKEN, "extensions": Extensions(routes=(deliveries.mount,))}


def cases(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(select(ops_case)).mappings()]


def resolutions(engine: Engine, case_id: UUID) -> list[dict[str, Any]]:
    query = select(case_timeline).where(case_timeline.c.case_id == case_id,
                                        case_timeline.c.event == "alert_resolved")
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]


def test_a_firing_rule_opens_one_case_and_its_resolution_is_noted_on_it(
        app: App, pg_engine: Engine, metric_service: MetricService,
        prometheus_server: Callable[..., Prometheus],
        alertmanager_server: Callable[..., Alertmanager]):
    with serve_api(app) as api:
        alertmanager = alertmanager_server(f"{api}/alerts/alertmanager", TOKEN)
        jobs = [ScrapeJob("checkout", [metric_service.target]),
                ScrapeJob("opsgate", [api.removeprefix("http://")])]
        prometheus = prometheus_server(jobs, rules=[RULE], alertmanager=alertmanager)
        prometheus.wait_for('up{job="opsgate"}', lambda values: values == [1.0])
        prometheus.wait_for(GAUGE, lambda values: values == [HEALTHY_P95_S])
        assert cases(pg_engine) == []

        metric_service.set(GAUGE, BAD_P95_S)
        [case] = poll(lambda: cases(pg_engine), 30, "Alertmanager's notification opens a case")
        assert case["title"] == "CheckoutSlow: checkout p95 over 1 s"
        assert case["severity"] == "SEV1" and case["status"] == "NEW"

        metric_service.set(GAUGE, HEALTHY_P95_S)
        [note] = poll(lambda: resolutions(pg_engine, case["id"]), 30,
                      "Alertmanager's resolved notification is noted on the case")
        assert note["reason"] == "CheckoutSlow resolved: checkout p95 over 1 s"
        assert note["actor"] == "alertmanager"
        assert [c["id"] for c in cases(pg_engine)] == [case["id"]]  # the group's one case


# -- large groups, as Alertmanager sends them --------------------------------------------------


def firing(name: str, count: int, description: Callable[[int], str]) -> list[dict[str, Any]]:
    """``count`` alerts of one group as Prometheus posts them to Alertmanager, firing for an
    hour."""
    now = datetime.now(UTC)
    return [{"labels": {"alertname": name, "instance": f"checkout-{n}", "job": "checkout",
                        "severity": "critical"},
             "annotations": {"summary": f"{name} on checkout-{n}", "description": description(n)},
             "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat(),
             "generatorURL": "http://prometheus.example.org:9090/graph?g0.expr=up+%3D%3D+0"}
            for n in range(count)]


def noted(engine: Engine, count: int) -> dict[str, Any] | None:
    """The group's one case once all ``count`` alerts are noted on it: the case, its opening
    note's alert count, its alert evidence rows."""
    with engine.connect() as conn:
        # One statement: read apart, "none unnoted" could be read before the alerts were
        # recorded and "all seen" after, while the case was still being opened.
        seen, unnoted = conn.execute(select(
            func.count(), func.count().filter(alert_seen.c.noted_at.is_(None)))).one()
        if seen < count or unnoted:
            return None
        [case] = conn.execute(select(ops_case)).mappings().all()
        opening = conn.execute(select(case_timeline.c.meta).where(
            case_timeline.c.case_id == case["id"], case_timeline.c.event == "alert_firing")
        ).scalar_one()
        evidence = conn.execute(select(func.count()).select_from(evidence_link).where(
            evidence_link.c.case_id == case["id"], evidence_link.c.kind == "alert")
        ).scalar_one()
    return {"case": dict(case), "alert_count": opening["context"]["alert_count"],
            "evidence": evidence, "seen": seen}


def long_description(n: int) -> str:
    words = (f"checkout-{n} has answered more than one request in twenty with an error for five "
             "minutes; the runbook says to look at the payment gateway's latency first. ")
    return (words * 9).strip()


def test_a_group_of_50_alerts_with_long_descriptions_opens_its_case_whole(
        app: App, pg_engine: Engine, deliveries: Deliveries,
        alertmanager_server: Callable[..., Alertmanager]):
    """About 86 KB in one notification: over the 64 KiB every other endpoint takes."""
    with serve_api(app) as api:
        alertmanager = alertmanager_server(f"{api}/alerts/alertmanager", TOKEN)
        alertmanager.post_alerts(firing("CheckoutErrors", 50, long_description))
        found = poll(lambda: noted(pg_engine, 50), 60, "the 50 alerts are noted on one case")
    sizes = [size for size, _ in deliveries.seen]
    print(f"\n50 alerts: bodies {sizes} bytes, answers {[s for _, s in deliveries.seen]}")
    assert max(sizes) > 80_000  # Alertmanager's own body, measured at the door
    assert {status for _, status in deliveries.seen} == {200}
    assert found["case"]["title"] == "CheckoutErrors"  # no common summary among 50
    assert (found["alert_count"], found["evidence"], found["seen"]) == (50, 50, 50)


def test_a_group_of_10000_alerts_opens_one_case_with_every_alert_noted(
        app: App, pg_engine: Engine, deliveries: Deliveries,
        alertmanager_server: Callable[..., Alertmanager]):
    """Alertmanager's default max_alerts (0) sends a group whole: 10,000 alerts in one
    notification. Its group_interval is 60 s so Alertmanager waits up to 60 s for the answer
    (it gives max(group_interval, 10 s)) and group_wait 5 s so one notification holds them
    all."""
    with serve_api(app) as api:
        alertmanager = alertmanager_server(f"{api}/alerts/alertmanager", TOKEN,
                                           group_wait="5s", group_interval="60s")
        alertmanager.post_alerts(firing("ProbeFailure", 10_000,
                                        lambda n: f"probe of checkout-{n} failed for 5m"))
        started = time.monotonic()
        found = poll(lambda: noted(pg_engine, 10_000), 120,
                     "the 10,000 alerts are noted on one case")
        took = time.monotonic() - started
    print(f"\n10,000 alerts: bodies {[size for size, _ in deliveries.seen]} bytes, answers "
          f"{[status for _, status in deliveries.seen]}, noted {took:.1f} s after the post")
    assert [status for _, status in deliveries.seen if 400 <= status < 500] == []
    assert max(size for size, _ in deliveries.seen) > 4_000_000
    assert (found["alert_count"], found["evidence"], found["seen"]) == (10_000, 10_000, 10_000)
    assert found["case"]["title"] == "ProbeFailure" and found["case"]["severity"] == "SEV1"
