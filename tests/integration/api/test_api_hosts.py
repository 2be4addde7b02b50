"""DNS rebinding (issue 24, finding 5): a request whose ``Host`` — or ``Origin``, when sent — is not
a name of the server is refused with 403 and one JSON error line before anything reads it, on
REST, ``/mcp``, ``/slack/events`` and the Alertmanager webhook, with a token or without. Today's
laptop default (127.0.0.1, no token) opened a case as ``anonymous`` for ``Host: evil.example``.

Real servers on 127.0.0.1 (uvicorn), real requests: httpx sends the Host header it is given."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from core import principals
from core.bootstrap import App, bootstrap
from core.settings import Settings
from tests.support.alerts import alert, notification
from tests.support.api import new_key
from tests.support.mcp_clients import case_count
from tests.support.metrics import STAND_IN_METRICS
from tests.support.peers import serve_api
from tests.support.slack import mention_event, running_bot, signed

EVIL_HOST = {"Host": "evil.example"}
EVIL_ORIGIN = {"Origin": "http://evil.example"}
FOREIGN = pytest.mark.parametrize("foreign", [EVIL_HOST, EVIL_ORIGIN],
                                  ids=["host", "origin"])
ALERT_TOKEN = "alert-token-for-hosts"
MCP_OPEN_CASE = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "open_case", "arguments": {"title": "Rebound"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def make_app(engine: Engine, **settings: Any) -> App:
    return bootstrap(Settings(_env_file=None, static_metrics=STAND_IN_METRICS,
                              alert_token=ALERT_TOKEN, **settings), engine=engine)


@pytest.fixture(params=["no token", "operator token"])
def server(request: pytest.FixtureRequest, sqlite_engine: Engine
           ) -> Iterator[tuple[str, dict[str, str]]]:
    """The API on 127.0.0.1 as a laptop runs it (no token), or with an operator's token; yields
    its URL and the Authorization header a caller sends (none without tokens)."""
    auth: dict[str, str] = {}
    if request.param == "operator token":
        _, token = principals.create(sqlite_engine, "ops-bot", "operator")
        auth = {"Authorization": f"Bearer {token}"}
    app = make_app(sqlite_engine)
    with serve_api(app) as base_url:
        yield base_url, auth
    app.close()


def refused(response: httpx.Response, code: str) -> None:
    assert response.status_code == 403, response.text
    assert response.headers["content-type"] == "application/json"
    assert "\n" not in response.text
    error = response.json()["error"]
    assert error["code"] == code and "refused, nothing ran" in error["message"]


def code_for(foreign: dict[str, str]) -> str:
    return "host_not_allowed" if "Host" in foreign else "origin_not_allowed"


@FOREIGN
def test_a_foreign_host_or_origin_opens_no_case_over_rest(
        server: tuple[str, dict[str, str]], sqlite_engine: Engine,
        foreign: dict[str, str]) -> None:
    base_url, auth = server
    with httpx.Client(base_url=base_url, timeout=10) as http:
        evil = http.post("/case/create", json={"title": "Rebound"},
                         headers={"Idempotency-Key": new_key(), **auth, **foreign})
        read = http.get("/case", headers={**auth, **foreign})
        local = http.post("/case/create", json={"title": "Local"},
                          headers={"Idempotency-Key": new_key(), **auth,
                                   "Origin": base_url})

    refused(evil, code_for(foreign))
    refused(read, code_for(foreign))
    assert local.status_code == 201, local.text
    assert case_count(sqlite_engine) == 1


@FOREIGN
def test_a_foreign_host_or_origin_opens_no_case_over_mcp(
        server: tuple[str, dict[str, str]], sqlite_engine: Engine,
        foreign: dict[str, str]) -> None:
    base_url, auth = server
    with httpx.Client(base_url=base_url, timeout=10) as http:
        evil = http.post("/mcp", json=MCP_OPEN_CASE, headers={**MCP_HEADERS, **auth, **foreign})
        local = http.post("/mcp", json=MCP_OPEN_CASE, headers={**MCP_HEADERS, **auth})

    refused(evil, code_for(foreign))
    assert local.status_code == 200 and not local.json()["result"]["isError"], local.text
    assert case_count(sqlite_engine) == 1


@FOREIGN
def test_a_foreign_host_or_origin_is_refused_at_the_alert_webhook(
        sqlite_engine: Engine, foreign: dict[str, str]) -> None:
    app = make_app(sqlite_engine)
    body = notification("Rebound", [alert("Rebound", "checkout-1")])
    auth = {"Authorization": f"Bearer {ALERT_TOKEN}"}
    with serve_api(app) as base_url, httpx.Client(base_url=base_url, timeout=10) as http:
        evil = http.post("/alerts/alertmanager", json=body, headers={**auth, **foreign})
        local = http.post("/alerts/alertmanager", json=body, headers=auth)
    app.close()

    refused(evil, code_for(foreign))
    assert local.status_code == 200, local.text
    assert case_count(sqlite_engine) == 1


@FOREIGN
def test_a_foreign_host_or_origin_is_refused_at_slack_events(
        sqlite_engine: Engine, foreign: dict[str, str]) -> None:
    body = mention_event("<@U0BOT> checkout returns 500s", event_id="EvHosts1", ts="1700.1")
    with running_bot(sqlite_engine, loop=False) as bot:
        evil = bot.http.post(f"{bot.base}/slack/events", content=body.encode(),
                             headers={**signed(body), **foreign})
        opened_by_evil = bot.case_of_thread("1700.1")

    refused(evil, code_for(foreign))
    assert opened_by_evil is None


def test_a_configured_name_is_served_and_others_still_refused(sqlite_engine: Engine) -> None:
    app = make_app(sqlite_engine, allowed_hosts=["opsgate.example.com", "10.0.0.5:8080"])
    with serve_api(app) as base_url, httpx.Client(base_url=base_url, timeout=10) as http:
        named = http.get("/case", headers={"Host": "OpsGate.Example.com:8443",
                                           "Origin": "https://opsgate.example.com"})
        wrong_port = http.get("/case", headers={"Host": "10.0.0.5:9090"})
        loopback = http.get("/healthz")
        null_origin = http.get("/case", headers={"Origin": "null"})
    app.close()

    assert named.status_code == 200, named.text
    refused(wrong_port, "host_not_allowed")
    assert loopback.status_code == 200
    refused(null_origin, "origin_not_allowed")


def test_the_refusal_is_one_json_line_naming_the_setting(sqlite_engine: Engine) -> None:
    app = make_app(sqlite_engine)
    with serve_api(app) as base_url, httpx.Client(base_url=base_url, timeout=10) as http:
        answer = http.post("/case/create", content=b"{" * 100_000,
                           headers={"Idempotency-Key": new_key(), **EVIL_HOST,
                                    "Content-Type": "application/json"})
    app.close()

    refused(answer, "host_not_allowed")
    assert json.loads(answer.text)["error"]["message"] == (
        "the Host 'evil.example' is not a name this server answers to "
        "(OPSGATE_ALLOWED_HOSTS): refused, nothing ran")
    assert answer.headers["x-correlation-id"]
