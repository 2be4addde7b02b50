"""Bad input is a 4xx, never a 5xx, on every endpoint: schemathesis generates requests from the
whole OpenAPI document a real ``opsgate serve`` publishes (``/openapi.json``: reads and writes),
and each is sent as each role sends it (a reader, an operator and an approver, each with a token
of ``opsgate token``'s kind; the Alertmanager and changes intakes with their own tokens), with a
key where a write needs one. Bounded: a few
examples per operation, no deadline (the machine is shared)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from core import principals
from core.db.database import make_engine
from tests.support.metrics import STAND_IN_ENV
from tests.support.peers import free_port
from tests.support.processes import Process, clean_env

EXAMPLES_PER_OPERATION = 6
EDGES = ("0001-01-01T00:00:00Z", "0001-01-01T00:02:00Z", "9999-12-31T23:59:59Z")
"""The ends of what a date-time can say: a window computed from one must not overflow (a few
random examples seldom reach them, with the other parameters a query needs)."""
START_DEADLINE_S = 90.0
ROLES = (("dash", "reader", None), ("svc-fuzz", "operator", None),
         ("lead", "approver", "U0LEAD"))
INTAKES = {"/alerts/alertmanager": ("alertmanager", "alert-token-fuzz"),
           "/changes": ("changes intake", "changes-token-fuzz")}
"""The intakes' own bearer tokens (OPSGATE_ALERT_TOKEN, OPSGATE_CHANGES_TOKEN): their writes are
sent with them, so the bodies are read, not refused at the door."""


@dataclass(frozen=True)
class Served:
    base: str
    tokens: dict[str, str]  # role -> bearer token
    serve: Process


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("schemathesis")
    url = f"sqlite:///{folder / 'opsgate.db'}"
    port = free_port()
    env = clean_env(OPSGATE_DATABASE_URL=url, OPSGATE_APPROVERS="U0LEAD",
                    OPSGATE_ALERT_TOKEN=INTAKES["/alerts/alertmanager"][1],
                    OPSGATE_CHANGES_TOKEN=INTAKES["/changes"][1], **STAND_IN_ENV)
    serve = Process("serve", ("serve", "--port", str(port), "--no-loop"), env,
                    folder / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        serve.start()
        serve.wait_healthy(base, START_DEADLINE_S)
        engine = make_engine(url)
        try:
            tokens = {role: principals.create(engine, name, role, slack)[1]  # type: ignore[arg-type]
                      for name, role, slack in ROLES}
        finally:
            engine.dispose()
        yield Served(base, tokens, serve)
    finally:
        serve.close()

def test_no_request_of_any_role_is_a_server_error(served: Served) -> None:
    # schemathesis.pytest.from_fixture reads pytest's private Function._nodeid, gone in pytest 9:
    # the schema is loaded here and each operation's strategy driven by hypothesis directly.
    schema = schemathesis.openapi.from_url(f"{served.base}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15, [op.label for op in operations]
    errors: list[str] = []
    for operation in operations:
        errors += server_errors(operation, served) + edge_errors(operation, served)
    assert errors == [], "\n".join(errors) + "\n--- serve\n" + served.serve.output()[-3000:]


def server_errors(operation: schemathesis.APIOperation, served: Served) -> list[str]:
    """Every 5xx answered to ``operation``'s generated requests, sent as each role; and the
    operation, when no request got past authentication (a test of the door, not the API)."""
    found: list[str] = []
    statuses: set[int] = set()

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck), database=None)
    def each(case: schemathesis.Case) -> None:
        for role, token in callers(operation, served):
            headers = {"Authorization": f"Bearer {token}"}
            if not any(name.lower() == "idempotency-key" for name in case.headers or {}):
                headers["Idempotency-Key"] = f"fuzz-{uuid.uuid4().hex}"
            response = case.call(base_url=served.base, headers=headers, timeout=30)
            statuses.add(response.status_code)
            if response.status_code >= 500:
                found.append(f"{operation.label} as {role}: {response.status_code} "
                             f"{response.text[:300]}\n    "
                             f"{case.as_curl_command(headers=headers)}")

    each()
    if statuses <= {401, 403}:
        found.append(f"{operation.label}: every request was refused at the door ({statuses})")
    return found


def edge_errors(operation: schemathesis.APIOperation, served: Served) -> list[str]:
    """Every 5xx to a read whose date-time query parameter is at an end of the calendar, its
    other query parameters named (their default, else ``x``), as each role."""
    query = list(operation.query)
    times = [p.name for p in query if '"format": "date-time"' in json.dumps(p.definition)]
    if operation.method.upper() != "GET" or not times or "{" in operation.path:
        return []
    others = {p.name: p.definition.get("schema", {}).get("default", "x") for p in query
              if p.name not in times}
    found = []
    for name in times:
        for edge in EDGES:
            for role, token in served.tokens.items():
                response = httpx.get(f"{served.base}{operation.path}", timeout=30,
                                     params={**others, name: edge},
                                     headers={"Authorization": f"Bearer {token}"})
                if response.status_code >= 500:
                    found.append(f"{operation.label}?{name}={edge} as {role}: "
                                 f"{response.status_code} {response.text[:300]}")
    return found


def callers(operation: schemathesis.APIOperation, served: Served) -> list[tuple[str, str]]:
    """Who sends ``operation``'s requests: an intake's write with its own token, every other
    request as each role."""
    intake = INTAKES.get(operation.path)
    if intake is not None and operation.method.upper() == "POST":
        return [intake]
    return list(served.tokens.items())
