"""Cases know their components (issue 27): named over REST (checked against the catalog), from
an alert's labels through the catalog's annotations; the running service reads catalog edits
without a restart, leaves a broken file out (it grants nothing), and says so in /readyz."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from core.api import create_api
from core.db.tables import ops_case
from tests.support.alerts import AUTH, TOKEN, alert, notification
from tests.support.api import assert_error, bearer, data, new_key
from tests.support.apps import make_app

EXAMPLES = Path(__file__).parents[3] / "docs" / "examples"
CAROL = "U0CAROL"  # search-team in docs/examples/catalog
SUMMER = datetime(2026, 6, 1, 12, tzinfo=UTC)
"""When the owners' policies judge: outside the example deploy freeze (2026-12-20 to 2027-01-04),
which would refuse carol whatever the catalog says."""
SEARCH_ROLLOUT = {
    "title": "Roll search-api back", "risk_score": 0.3,
    "steps": [{"action": "k8s.rollout", "params": {
        "operation": "set-image", "namespace": "search", "deployment": "search-api",
        "container": "api", "image": "registry.example.com/search:v1.2.0"},
        "timeout_s": 300, "retry": 0}],
    "rollback": {"action": "noop"},
    "verify": {"metric": "http_5xx_ratio", "below": 0.01, "for_s": 60},
}


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    folder = tmp_path / "catalog"
    shutil.copytree(EXAMPLES / "catalog", folder)
    return folder


@pytest.fixture
def app_options(catalog: Path) -> dict[str, Any]:
    return {"catalog": catalog, "policy": EXAMPLES / "policies", "alert_token": TOKEN,
            "approvers": [], "directory": ["catalog"]}


def opened(client: TestClient, engine: Engine, **body: Any) -> Any:
    headers = {**bearer(engine, "ops", None, "operator"), "Idempotency-Key": new_key()}
    return client.post("/case/create", json={"title": "payments 5xx", **body}, headers=headers)


def case_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ops_case)).scalar_one())


def test_a_case_names_its_components_over_rest(client, engine):
    case = data(opened(client, engine, components=["payments-api"]), 201)
    assert case["components"] == ["payments-api"]
    again = client.get(f"/case/{case['case_id']}", headers=bearer(engine, "reader", None,
                                                                  "reader"))
    assert data(again)["components"] == ["payments-api"]


def test_an_unknown_component_is_a_clear_422_that_opens_nothing(client, engine):
    before = case_count(engine)
    body = assert_error(opened(client, engine, components=["payments-apii"]), 422,
                        "invalid_request")
    message = body["message"]
    assert message.startswith("unknown component payments-apii: not in the service catalog")
    assert "payments-api" in message and case_count(engine) == before


def test_without_a_catalog_no_component_can_be_named(engine):
    app = make_app(engine)
    try:
        with TestClient(create_api(app), base_url="http://localhost") as client:
            body = assert_error(opened(client, engine, components=["payments-api"]), 422,
                                "invalid_request")
    finally:
        app.close()
    assert "none: OPSGATE_CATALOG is unset" in body["message"]


def test_an_alerts_labels_name_its_cases_components(client, engine):
    firing = alert("PaymentsErrors", "10.0.0.7:8080")
    firing["labels"] |= {"job": "payments-api", "namespace": "payments"}
    reply = client.post("/alerts/alertmanager", json=notification("PaymentsErrors", [firing]),
                        headers=AUTH)
    assert reply.status_code == 200, reply.text
    with engine.connect() as conn:
        [components] = conn.execute(select(ops_case.c.components)).scalars().all()
    assert components == ["payments-api"]


def test_the_running_service_reads_a_catalog_edit_and_leaves_a_broken_file_out(app, catalog):
    def refusal() -> str | None:
        return app.policy.at((), SUMMER).refusal(CAROL, "agent", SEARCH_ROLLOUT)

    assert refusal() is None  # carol's search-team owns search-api
    search = catalog / "search.yaml"
    search.write_text(search.read_text().replace("owner: search-team", "owner: payments-oncall"))
    assert eventually(lambda: refusal() is not None)
    assert "only payments-oncall may approve changes to search-api" in str(refusal())

    search.write_text("apiVersion: backstage.io/v1alpha1\nkind: Component\n"
                      "metadata: {name: search-api}\n")  # broken: no spec, no owner
    assert eventually(lambda: app.catalog.current() and app.catalog.problem is not None)
    assert "search-api" not in app.catalog.current().components  # the broken file grants nothing
    assert refusal() is not None
    from core.ops.readiness import check_policy

    check = check_policy(app)
    assert check["degraded"] == [str(search)]
    assert check["warning"].startswith(f"OPSGATE_CATALOG: left out until fixed, granting "
                                       f"nothing: {search}: {search}: Component search-api")


def eventually(condition: Any, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())
