"""Alertmanager as the tests play it: alerts and webhook notifications in the documented shape
(version 4), the app that takes them behind its bearer token, the POST that delivers one, and
the refusals the API counts."""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from core.bootstrap import App
from tests.support.apps import make_app

TOKEN = "am-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FIRING_ENDS = "0001-01-01T00:00:00Z"


def alert(name: str, instance: str, *, resolved: bool = False,
          severity: str = "critical") -> dict[str, Any]:
    """One alert as Alertmanager's webhook documents it."""
    return {
        "status": "resolved" if resolved else "firing",
        "labels": {"alertname": name, "instance": instance, "job": "checkout",
                   "severity": severity},
        "annotations": {"summary": f"{name} on {instance}",
                        "description": f"{instance} has been failing for 5m"},
        "startsAt": "2026-11-23T05:00:00.000Z",
        "endsAt": "2026-11-23T05:30:00.000Z" if resolved else FIRING_ENDS,
        "generatorURL": "http://prometheus.example.org:9090/graph?g0.expr=probe_success+%3D%3D+0",
        "fingerprint": hashlib.sha256(f"{name}/{instance}".encode()).hexdigest()[:16],
    }


def notification(name: str, alerts: list[dict[str, Any]],
                 severity: str = "critical") -> dict[str, Any]:
    """A webhook notification of the group ``alertname=name`` (version 4)."""
    firing = any(a["status"] == "firing" for a in alerts)
    return {
        "version": "4",
        "groupKey": f'{{}}/{{severity="{severity}"}}:{{alertname="{name}"}}',
        "truncatedAlerts": 0,
        "status": "firing" if firing else "resolved",
        "receiver": "opsgate",
        "groupLabels": {"alertname": name},
        "commonLabels": {"alertname": name, "job": "checkout", "severity": severity},
        "commonAnnotations": {"summary": f"{name} on checkout"},
        "externalURL": "http://alertmanager.example.org:9093",
        "alerts": alerts,
    }


def alerts_app(engine: Engine, token: str | None = TOKEN) -> App:
    return make_app(engine, alert_token=token)


def post(client: TestClient, body: dict[str, Any], headers: dict[str, str] = AUTH) -> Any:
    return client.post("/alerts/alertmanager", json=body, headers=headers)


def refusals(client: TestClient) -> dict[str, float]:
    """``alert_notification_refused_total`` by reason, as ``/metrics`` shows it (the counter is
    process-wide: compare before and after)."""
    text = client.get("/metrics").text
    return {sample.labels["reason"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "alert_notification_refused_total"}


def refused_since(client: TestClient, before: dict[str, float]) -> dict[str, float]:
    """The refusals counted since ``before``, by reason (reasons not counted are left out)."""
    return {reason: value - before.get(reason, 0.0)
            for reason, value in refusals(client).items() if value != before.get(reason, 0.0)}
