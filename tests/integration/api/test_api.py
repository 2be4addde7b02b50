"""The REST API over the real case service, on SQLite and PostgreSQL: every endpoint, every
status it answers with, and the one error shape ``{"error": {"code", "message", ...}}``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from core.api import create_api
from core.api.limits import MAX_BODY_BYTES
from core.api.schemas import META_MAX_BYTES
from core.bootstrap import App, bootstrap
from core.db.tables import case_timeline, idempotency, ops_case, outbox
from core.domain.commands import SEVERITIES
from core.domain.plan_templates import load_template, template_names
from core.domain.plans import plan_hash
from core.settings import Settings
from tests.support.api import assert_error, bearer, data, new_key, rows
from tests.support.cases import APPROVERS
from tests.support.metrics import STAND_IN_METRICS
from tests.support.scripts import restart_service  # noqa: F401 (a fixture)

TOKEN = "s3cret-token"
INCOMPLETE_PLAN = {"title": "restart it", "steps": [{"action": "script.exec"}]}


def _app(engine: Engine, token: str | None = None, **options: Any) -> App:
    settings = Settings(static_metrics=STAND_IN_METRICS,
                        _env_file=None, api_token=token, redis_url=None,
                        approvers=sorted(APPROVERS), **options)
    return bootstrap(settings, engine=engine)


@pytest.fixture
def client(engine: Engine, restart_service: dict[str, Any]) -> Iterator[TestClient]:  # noqa: F811
    """A client of an API whose plans may run the templates' runbook script."""
    app = _app(engine, **restart_service)
    with TestClient(create_api(app), base_url="http://localhost") as test_client:
        yield test_client
    app.close()


@pytest.fixture
def locked_client(engine: Engine) -> Iterator[TestClient]:
    """A client of an API whose server has OPSGATE_API_TOKEN set."""
    app = _app(engine, token=TOKEN)
    with TestClient(create_api(app), base_url="http://localhost") as test_client:
        yield test_client
    app.close()


# -- helpers --------------------------------------------------------------------------------


def create(client: TestClient, key: str | None = None, **body: Any) -> Any:
    body = {"title": "p95 spike on checkout", **body}
    return client.post("/case/create", json=body, headers={"Idempotency-Key": key or new_key()})


def move(client: TestClient, case_id: str, event: str, *, key: str | None = None,
         headers: dict[str, str] | None = None, actor: str = "alice", **body: Any) -> Any:
    return client.patch(f"/case/{case_id}/transition", json={"event": event, "actor": actor,
                                                             **body},
                        headers={"Idempotency-Key": key or new_key(), **(headers or {})})


def open_case(client: TestClient) -> str:
    response = create(client)
    assert response.status_code == 201, response.text
    case_id: str = response.json()["data"]["case_id"]
    return case_id


def case_in(client: TestClient, *events: str) -> str:
    case_id = open_case(client)
    for event in events:
        assert move(client, case_id, event).status_code == 200
    return case_id


def planning_case(client: TestClient) -> str:
    return case_in(client, "start_analysis", "analysis_done")


def generate(client: TestClient, case_id: str, template: str = "k8s.rollout.canary",
             key: str | None = None) -> Any:
    return client.post("/plan/generate", json={"case_id": case_id, "template": template},
                       headers={"Idempotency-Key": key or new_key()})


def timeline(client: TestClient, case_id: str,
             headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = data(client.get(f"/case/{case_id}/timeline", headers=headers))
    return result


def approve(client: TestClient, case_id: str, digest: str, headers: dict[str, str],
            **extra: Any) -> Any:
    return client.post(f"/case/{case_id}/approve", json={"plan_hash": digest},
                       headers={"Idempotency-Key": new_key(), **headers, **extra})


# -- POST /case/create ----------------------------------------------------------------------


def test_create_opens_a_case_in_new_at_version_0(client):
    response = create(client, severity="SEV2", tenant="t-001", actor="pagerduty")
    case = data(response, 201)
    assert case["status"] == "NEW"
    assert case["version"] == 0
    assert (case["severity"], case["tenant"], case["title"]) == ("SEV2", "t-001",
                                                                 "p95 spike on checkout")
    assert response.headers["etag"] == '"0"'
    assert response.headers["location"] == f"/case/{case['case_id']}"
    # No token configured: the write is anonymous's; the body's actor is only stated.
    [opened] = timeline(client, case["case_id"])
    assert opened["actor"] == "anonymous"
    assert (opened["meta"]["principal"], opened["meta"]["stated_actor"]) == ("anonymous",
                                                                             "pagerduty")


def test_create_defaults_severity_tenant_and_actor(client):
    case = data(create(client), 201)
    assert (case["severity"], case["tenant"]) == ("SEV3", "default")
    [opened] = timeline(client, case["case_id"])
    assert opened["actor"] == "anonymous" and "stated_actor" not in opened["meta"]


def test_a_replayed_create_returns_the_same_bytes_and_writes_nothing(client, engine):
    key = new_key()
    first = create(client, key=key)
    before = (rows(engine, ops_case), rows(engine, outbox), rows(engine, idempotency))
    again = create(client, key=key)
    assert again.status_code == first.status_code == 201
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert (rows(engine, ops_case), rows(engine, outbox), rows(engine, idempotency)) == before


def test_a_key_reused_for_a_different_request_is_422(client):
    key = new_key()
    create(client, key=key)
    assert_error(create(client, key=key, title="another incident"), 422,
                 "idempotency_key_reused")


@pytest.mark.parametrize("severity", SEVERITIES)
def test_every_domain_severity_is_accepted(client, severity):
    assert data(create(client, severity=severity), 201)["severity"] == severity


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"title": "x", "priority": 1}, "body.priority"),
        ({"title": "x" * 201}, "body.title"),
        ({"title": ""}, "body.title"),
        ({"title": 42}, "body.title"),
        ({}, "body.title"),
        ({"title": "x", "severity": "SEV9"}, "body.severity"),
        ({"title": "x", "tenant": "t" * 65}, "body.tenant"),
        ({"title": "x", "actor": "a" * 129}, "body.actor"),
        ({"title": "x", "actor": 42}, "body.actor"),
    ],
)
def test_an_invalid_create_body_is_422_naming_the_field(client, engine, body, where):
    response = client.post("/case/create", json=body, headers={"Idempotency-Key": new_key()})
    error = assert_error(response, 422, "invalid_request")
    assert where in [problem["loc"] for problem in error["details"]["problems"]]
    assert rows(engine, ops_case) == 0


@pytest.mark.parametrize(
    ("content", "content_type"),
    [(b"{not json", "application/json"), (b"[1, 2]", "application/json"),
     (b'{"title": "x"}', "text/plain"), (b"", "application/json")],
)
def test_a_body_that_is_not_a_json_object_is_422(client, content, content_type):
    response = client.post("/case/create", content=content,
                           headers={"Idempotency-Key": new_key(), "Content-Type": content_type})
    assert_error(response, 422, "invalid_request")


# -- headers of a write: Idempotency-Key, Authorization -------------------------------------


def _writes(case_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("POST", "/case/create", {"title": "x"}),
        ("PATCH", f"/case/{case_id}/transition", {"event": "start_analysis", "actor": "a"}),
        ("POST", "/plan/generate", {"case_id": case_id, "template": "noop"}),
    ]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_write_without_an_idempotency_key_is_400_and_changes_nothing(client, engine, which):
    case_id = open_case(client)
    before = (rows(engine, ops_case), rows(engine, case_timeline), rows(engine, idempotency))
    method, path, body = _writes(case_id)[which]
    error = assert_error(client.request(method, path, json=body), 400, "bad_request")
    assert "Idempotency-Key" in error["message"]
    assert data(client.get(f"/case/{case_id}"))["version"] == 0
    assert (rows(engine, ops_case), rows(engine, case_timeline), rows(engine, idempotency)) \
        == before


@pytest.mark.parametrize("key", ["", "k" * 201, "tab\tinside"])
def test_a_malformed_idempotency_key_is_400(client, key):
    response = client.post("/case/create", json={"title": "x"}, headers={"Idempotency-Key": key})
    assert_error(response, 400, "bad_request")


def test_a_key_of_200_printable_characters_is_accepted(client):
    assert create(client, key="k" * 199 + "~").status_code == 201


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer ", f"Bearer {TOKEN}x"]
)
def test_with_a_token_set_a_write_without_the_right_bearer_is_401(locked_client, engine,
                                                                   authorization):
    headers = {"Idempotency-Key": new_key()}
    if authorization is not None:
        headers["Authorization"] = authorization
    response = locked_client.post("/case/create", json={"title": "x"}, headers=headers)
    assert_error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"
    assert rows(engine, ops_case) == 0


def test_with_a_token_set_the_right_bearer_writes_and_reads(locked_client):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    response = locked_client.post("/case/create", json={"title": "x"},
                                  headers={"Idempotency-Key": new_key(), **auth})
    case_id = data(response, 201)["case_id"]
    assert data(locked_client.get(f"/case/{case_id}", headers=auth))["case_id"] == case_id
    assert len(data(locked_client.get(f"/case/{case_id}/timeline", headers=auth))) == 1
    assert len(data(locked_client.get("/case", headers=auth))) == 1
    # Reads need the token too now (OPSGATE_API_READS=open keeps them open: see
    # test_api_principals.py); health stays open for probes.
    assert_error(locked_client.get(f"/case/{case_id}"), 401, "unauthorized")
    assert locked_client.get("/healthz").status_code == 200


def test_authentication_is_checked_before_the_idempotency_key(locked_client):
    assert_error(locked_client.post("/case/create", json={"title": "x"}), 401, "unauthorized")


def test_without_a_token_set_writes_need_no_bearer(client):
    assert create(client).status_code == 201


# -- 413 ------------------------------------------------------------------------------------


def test_a_body_over_64_kib_is_413_and_writes_nothing(client, engine):
    body = b'{"title": "' + b"x" * MAX_BODY_BYTES + b'"}'
    response = client.post("/case/create", content=body,
                           headers={"Idempotency-Key": new_key(),
                                    "Content-Type": "application/json"})
    error = assert_error(response, 413, "payload_too_large")
    assert error["details"] == {"limit": MAX_BODY_BYTES}
    assert rows(engine, ops_case) == 0


def test_a_chunked_body_over_64_kib_is_413(client, engine):
    case_id = open_case(client)
    chunks = iter([b'{"event": "start_analysis", "actor": "', b"a" * MAX_BODY_BYTES, b'"}'])
    response = client.patch(f"/case/{case_id}/transition", content=chunks,
                            headers={"Idempotency-Key": new_key(),
                                     "Content-Type": "application/json"})
    assert_error(response, 413, "payload_too_large")
    assert data(client.get(f"/case/{case_id}"))["version"] == 0


def test_a_body_just_under_the_limit_reaches_validation(client):
    body = b'{"title": "x", "pad": "' + b"p" * (MAX_BODY_BYTES - 100) + b'"}'
    response = client.post("/case/create", content=body,
                           headers={"Idempotency-Key": new_key(),
                                    "Content-Type": "application/json"})
    assert_error(response, 422, "invalid_request")


# -- reads ----------------------------------------------------------------------------------


def test_get_case_returns_it_with_its_version_as_etag(client):
    case_id = case_in(client, "start_analysis")
    response = client.get(f"/case/{case_id}")
    case = data(response)
    assert (case["case_id"], case["status"], case["version"]) == (case_id, "ANALYZING", 1)
    assert response.headers["etag"] == '"1"'


@pytest.mark.parametrize("suffix", ["", "/timeline"])
def test_an_unknown_case_is_404(client, suffix):
    missing = uuid.uuid4()
    error = assert_error(client.get(f"/case/{missing}{suffix}"), 404, "not_found")
    assert error["details"] == {"case_id": str(missing)}


@pytest.mark.parametrize("path", ["/case/not-a-uuid", "/case/123/timeline"])
def test_a_malformed_case_id_in_the_path_is_422(client, path):
    error = assert_error(client.get(path), 422, "invalid_request")
    assert error["details"]["problems"][0]["loc"] == "path.case_id"


def test_a_malformed_case_id_in_a_transition_path_is_422(client):
    assert_error(move(client, "nope", "start_analysis"), 422, "invalid_request")


def test_the_timeline_lists_opening_and_moves_oldest_first(client):
    case_id = case_in(client, "start_analysis", "analysis_done")
    entries = timeline(client, case_id)
    assert [entry["event"] for entry in entries] == ["case_opened", "start_analysis",
                                                     "analysis_done"]
    assert [entry["meta"]["to"] for entry in entries] == ["NEW", "ANALYZING", "PLANNING"]
    assert set(entries[0]) == {"id", "event", "actor", "reason", "correlation_id", "meta",
                               "created_at"}


def test_the_case_list_filters_by_status_and_limits(client):
    new = [open_case(client) for _ in range(3)]
    analyzing = case_in(client, "start_analysis")
    all_cases = data(client.get("/case"))
    assert {case["case_id"] for case in all_cases} == {*new, analyzing}
    assert [case["case_id"] for case in data(client.get("/case?status=ANALYZING"))] == [analyzing]
    assert {case["case_id"] for case in data(client.get("/case?status=NEW"))} == set(new)
    assert data(client.get("/case?status=CLOSED")) == []
    assert len(data(client.get("/case?limit=2"))) == 2


@pytest.mark.parametrize("query", ["status=BOGUS", "limit=0", "limit=201", "limit=many"])
def test_a_bad_list_query_is_422(client, query):
    assert_error(client.get(f"/case?{query}"), 422, "invalid_request")


def test_healthz_reports_the_database(client, engine):
    assert data(client.get("/healthz")) == {"status": "ok", "database": engine.dialect.name}


@pytest.mark.parametrize("url", ["sqlite:////nonexistent-dir/sub/opsgate.db",
                                 "postgresql://postgres@127.0.0.1:1/test"])
def test_an_unreachable_database_is_503_on_reads_and_writes(url):
    settings = Settings(static_metrics=STAND_IN_METRICS,
                        _env_file=None, database_url=url, api_token=None, redis_url=None)
    app = bootstrap(settings)
    try:
        with TestClient(create_api(app), base_url="http://localhost") as unreachable:
            assert unreachable.get("/healthz").status_code == 200  # the process is up
            not_ready = unreachable.get("/readyz")
            assert not_ready.status_code == 503, not_ready.text
            assert not_ready.json()["data"]["checks"]["database"]["ok"] is False
            assert_error(unreachable.get(f"/case/{uuid.uuid4()}"), 503, "unavailable")
            assert_error(create(unreachable), 503, "unavailable")
    finally:
        app.close()


def test_openapi_describes_every_endpoint_and_the_error_shape(client):
    spec = client.get("/openapi.json").json()
    assert set(spec["paths"]) == {"/case/create", "/case", "/case/{case_id}",
                                  "/case/{case_id}/timeline", "/case/{case_id}/transition",
                                  "/case/{case_id}/approve", "/case/{case_id}/reject",
                                  "/plan/generate", "/gate/eval", "/adapter/exec",
                                  "/verify/run", "/healthz", "/readyz",
                                  "/alerts/alertmanager", "/changes"}
    transition = spec["paths"]["/case/{case_id}/transition"]["patch"]
    assert {"200", "400", "401", "403", "404", "409", "412", "413", "422"} <= set(
        transition["responses"])
    approve_op = spec["paths"]["/case/{case_id}/approve"]["post"]
    assert {"403", "412", "422"} <= set(approve_op["responses"])
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert {"HTTPBearer": []} in approve_op["security"]
    assert {"HTTPBearer": []} in spec["paths"]["/case/{case_id}"]["get"]["security"]
    assert "ErrorReply" in spec["components"]["schemas"]
    assert "Idempotency-Key" in {param["name"] for param in transition["parameters"]}


def test_an_unknown_route_is_404_in_the_error_shape(client):
    assert_error(client.get("/nowhere"), 404, "not_found")
    assert_error(client.post("/case/create/extra", json={}), 404, "not_found")


def test_a_wrong_method_is_405_in_the_error_shape(client):
    response = client.delete("/case/create")
    assert_error(response, 405, "method_not_allowed")
    assert "POST" in response.headers["allow"]


# -- PATCH /case/{id}/transition ------------------------------------------------------------


def test_a_legal_event_moves_the_case_and_bumps_the_version(client):
    case_id = open_case(client)
    response = move(client, case_id, "start_analysis", reason="paged")
    case = data(response)
    assert (case["status"], case["version"]) == ("ANALYZING", 1)
    assert response.headers["etag"] == '"1"'
    assert timeline(client, case_id)[-1]["reason"] == "paged"


def test_an_illegal_event_is_409_and_changes_nothing(client, engine):
    case_id = open_case(client)
    before = (rows(engine, case_timeline), rows(engine, outbox))
    error = assert_error(move(client, case_id, "verify_pass"), 409, "illegal_transition")
    assert error["details"] == {"status": "NEW", "event": "verify_pass"}
    assert data(client.get(f"/case/{case_id}"))["version"] == 0
    assert (rows(engine, case_timeline), rows(engine, outbox)) == before


def test_an_event_on_an_unknown_case_is_404(client):
    assert_error(move(client, str(uuid.uuid4()), "start_analysis"), 404, "not_found")


@pytest.mark.parametrize("if_match", ['"1"', 'W/"1"', "1"])
def test_if_match_naming_the_current_version_is_accepted(client, if_match):
    case_id = case_in(client, "start_analysis")
    response = move(client, case_id, "analysis_done", headers={"If-Match": if_match})
    assert data(response)["version"] == 2


def test_if_match_star_expects_no_particular_version(client):
    case_id = case_in(client, "start_analysis")
    assert data(move(client, case_id, "analysis_done", headers={"If-Match": "*"}))["version"] == 2


def test_a_stale_if_match_is_412_and_changes_nothing(client, engine):
    case_id = case_in(client, "start_analysis")
    before = rows(engine, case_timeline)
    error = assert_error(move(client, case_id, "analysis_done", headers={"If-Match": '"0"'}),
                         412, "version_conflict")
    assert error["details"] == {"expected_version": 0, "version": 1}
    assert data(client.get(f"/case/{case_id}"))["status"] == "ANALYZING"
    assert rows(engine, case_timeline) == before


def test_a_stale_expected_version_in_the_body_is_412(client):
    case_id = case_in(client, "start_analysis")
    assert_error(move(client, case_id, "analysis_done", expected_version=0), 412,
                 "version_conflict")
    assert data(move(client, case_id, "analysis_done", expected_version=1))["version"] == 2


def test_if_match_and_expected_version_that_disagree_are_400(client):
    case_id = case_in(client, "start_analysis")
    response = move(client, case_id, "analysis_done", expected_version=1,
                    headers={"If-Match": '"0"'})
    assert_error(response, 400, "bad_request")
    assert data(move(client, case_id, "analysis_done", expected_version=1,
                     headers={"If-Match": '"1"'}))["version"] == 2


@pytest.mark.parametrize("if_match", ['"one"', '"-1"', '"1", "2"', '"12345678901"'])
def test_a_malformed_if_match_is_400(client, if_match):
    case_id = open_case(client)
    assert_error(move(client, case_id, "start_analysis", headers={"If-Match": if_match}), 400,
                 "bad_request")


def test_an_incomplete_plan_is_refused_by_the_guard_with_one_timeline_row(client, engine):
    case_id = planning_case(client)
    before_outbox = rows(engine, outbox)
    before = timeline(client, case_id)
    error = assert_error(move(client, case_id, "plan_ready", plan=INCOMPLETE_PLAN), 422,
                         "guard_failed")
    assert error["details"]["problems"]
    after = timeline(client, case_id)
    assert len(after) == len(before) + 1
    assert after[-1]["event"] == "plan_ready"
    assert after[-1]["meta"]["outcome"] == "refused"
    case = data(client.get(f"/case/{case_id}"))
    assert (case["status"], case["version"]) == ("PLANNING", 2)
    assert rows(engine, outbox) == before_outbox


@pytest.mark.parametrize(("verify", "problem"), [
    ({"metric": "checkout_p95_seconds"}, "plan.verify: a metric check needs 'below' or 'above'"),
    ({"metric": "checkout_p95_seconds", "below": 1, "window": 300},
     "plan.verify.window: unknown key; expected metric, below, above, for_s, timeout_s"),
    ({"metric": "checkout_p95_seconds", "below": 1, "for_s": 300, "timeout_s": 120},
     "plan.verify.for_s: 300s is longer than the block's timeout_s 120s: it could never hold "
     "for its window before the deadline"),
])
def test_a_verify_block_that_could_never_be_judged_is_422_naming_the_problem(
        client, engine, verify, problem):
    """Refused at plan_ready, so the model repairs it before anyone is asked to approve."""
    case_id = planning_case(client)
    before_outbox = rows(engine, outbox)
    plan = {**load_template("noop"), "verify": verify}
    error = assert_error(move(client, case_id, "plan_ready", plan=plan), 422, "guard_failed")
    assert error["details"]["problems"] == [problem]
    assert rows(engine, outbox) == before_outbox
    assert data(client.get(f"/case/{case_id}"))["status"] == "PLANNING"


def test_a_replayed_refusal_returns_the_same_bytes_and_writes_nothing(client, engine):
    case_id = planning_case(client)
    key = new_key()
    first = move(client, case_id, "plan_ready", key=key, plan=INCOMPLETE_PLAN)
    assert_error(first, 422, "guard_failed")
    before = (rows(engine, case_timeline), rows(engine, idempotency))
    again = move(client, case_id, "plan_ready", key=key, plan=INCOMPLETE_PLAN)
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    assert (rows(engine, case_timeline), rows(engine, idempotency)) == before


def test_a_replayed_409_returns_the_same_bytes(client):
    case_id = open_case(client)
    key = new_key()
    first = move(client, case_id, "exec_done", key=key)
    again = move(client, case_id, "exec_done", key=key)
    assert_error(again, 409, "illegal_transition")
    assert again.content == first.content


def test_a_replayed_move_returns_the_first_reply_even_after_the_case_moved_on(client):
    case_id = open_case(client)
    key = new_key()
    first = move(client, case_id, "start_analysis", key=key)
    move(client, case_id, "analysis_done")
    again = move(client, case_id, "start_analysis", key=key)
    assert (again.status_code, again.content) == (200, first.content)
    assert data(client.get(f"/case/{case_id}"))["version"] == 2


def test_the_same_key_for_a_different_move_is_422(client):
    case_id = open_case(client)
    key = new_key()
    move(client, case_id, "start_analysis", key=key)
    assert_error(move(client, case_id, "start_analysis", key=key, reason="other"), 422,
                 "idempotency_key_reused")


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ({"event": "launch"}, "body.event"),
        ({"actor": ""}, "body.actor"),
        ({"reason": "r" * 2001}, "body.reason"),
        ({"correlation_id": "c" * 129}, "body.correlation_id"),
        ({"expected_version": "1"}, "body.expected_version"),
        ({"expected_version": -1}, "body.expected_version"),
        ({"expected_version": True}, "body.expected_version"),
        ({"plan": ["not", "an", "object"]}, "body.plan"),
        ({"plan_hash": "h" * 65}, "body.plan_hash"),
        ({"fence": {"session_id": "s", "token": "1"}}, "body.fence.token"),
        ({"fence": {"session_id": "s"}}, "body.fence.token"),
        ({"fence": {"session_id": "s", "token": 1, "extra": 1}}, "body.fence.extra"),
        ({"meta": {"k": "v" * META_MAX_BYTES}}, "body.meta"),
        ({"meta": {f"k{i}": i for i in range(33)}}, "body.meta"),
        ({"meta": "text"}, "body.meta"),
        ({"status": "CLOSED"}, "body.status"),
    ],
)
def test_an_invalid_transition_body_is_422_naming_the_field(client, extra, where):
    case_id = open_case(client)
    body = {"event": "start_analysis", "actor": "alice", **extra}
    response = client.patch(f"/case/{case_id}/transition", json=body,
                            headers={"Idempotency-Key": new_key()})
    error = assert_error(response, 422, "invalid_request")
    assert where in [problem["loc"] for problem in error["details"]["problems"]]
    assert data(client.get(f"/case/{case_id}"))["version"] == 0


def test_the_correlation_id_header_becomes_the_correlation_id(client):
    response = client.post("/case/create", json={"title": "x"},
                           headers={"Idempotency-Key": new_key(), "X-Correlation-Id": "inc-42"})
    case_id = data(response, 201)["case_id"]
    move(client, case_id, "start_analysis", correlation_id="from-body",
         headers={"X-Correlation-Id": "inc-43"})
    move(client, case_id, "analysis_done", correlation_id="from-body")
    assert [row["correlation_id"] for row in timeline(client, case_id)] == [
        "inc-42", "inc-43", "from-body"]


def test_a_malformed_correlation_id_header_is_400(client):
    response = client.post("/case/create", json={"title": "x"},
                           headers={"Idempotency-Key": new_key(), "X-Correlation-Id": "c" * 129})
    assert_error(response, 400, "bad_request")


def test_meta_is_kept_in_the_timeline(client):
    case_id = open_case(client)
    move(client, case_id, "start_analysis", meta={"alert": "p95", "runbook": 7})
    assert timeline(client, case_id)[-1]["meta"]["context"] == {"alert": "p95", "runbook": 7}


def test_a_stale_fence_is_412_and_the_latest_fence_is_accepted(client):
    cases = client.app.state.opsgate.cases
    old = cases.issue_fence("thread-1")
    latest = cases.issue_fence("thread-1")
    case_id = open_case(client)
    error = assert_error(
        move(client, case_id, "start_analysis",
             fence={"session_id": old.session_id, "token": old.token}), 412, "stale_fence")
    assert error["details"]["latest"] == latest.token
    response = move(client, case_id, "start_analysis",
                    fence={"session_id": latest.session_id, "token": latest.token})
    assert data(response)["version"] == 1


# -- POST /plan/generate and the approval ---------------------------------------------------


@pytest.mark.parametrize("template", template_names())
def test_generate_attaches_the_template_plan_and_waits_at_the_gate(client, template):
    case_id = planning_case(client)
    case = data(generate(client, case_id, template))
    assert (case["status"], case["version"]) == ("WAIT_GATE", 3)
    assert case["plan_hash"] == plan_hash(load_template(template))
    assert timeline(client, case_id)[-1]["meta"]["plan_hash"] == case["plan_hash"]


def test_an_unknown_template_is_404_listing_the_known_ones(client):
    case_id = planning_case(client)
    error = assert_error(generate(client, case_id, "k8s.delete.everything"), 404, "not_found")
    assert error["details"]["known"] == list(template_names())
    assert data(client.get(f"/case/{case_id}"))["status"] == "PLANNING"


def test_generate_for_an_unknown_case_is_404(client):
    assert_error(generate(client, str(uuid.uuid4())), 404, "not_found")


def test_generate_outside_planning_is_409(client):
    assert_error(generate(client, open_case(client)), 409, "illegal_transition")


@pytest.mark.parametrize(
    "body", [{"case_id": "nope", "template": "noop"}, {"template": "noop"},
             {"case_id": str(uuid.uuid4()), "template": "t" * 101},
             {"case_id": str(uuid.uuid4()), "template": "noop", "plan": {}}])
def test_an_invalid_generate_body_is_422(client, body):
    response = client.post("/plan/generate", json=body, headers={"Idempotency-Key": new_key()})
    assert_error(response, 422, "invalid_request")


def test_a_replayed_generate_returns_the_same_bytes(client):
    case_id = planning_case(client)
    key = new_key()
    first = generate(client, case_id, key=key)
    again = generate(client, case_id, key=key)
    assert (again.status_code, again.content) == (200, first.content)


# Approvals used to be gate_approved transitions naming the approver in the body; they are now
# POST /case/{id}/approve by an approver principal (test_api_principals.py has the rules).


def test_approval_must_name_the_generated_plan(client, engine):
    case_id = planning_case(client)
    digest = data(generate(client, case_id))["plan_hash"]
    lead = bearer(engine)
    assert_error(approve(client, case_id, "0" * 64, lead), 422, "stale_plan")
    approved = data(approve(client, case_id, digest, lead))
    assert (approved["status"], approved["plan_hash"]) == ("EXECUTING", digest)
    assert approved["approval"]["approvers"] == ["U0LEAD"]


def test_a_case_lives_its_whole_life_through_the_api(client, engine):
    case_id = planning_case(client)
    digest = data(generate(client, case_id, "script.restart"))["plan_hash"]
    lead = bearer(engine)
    assert data(approve(client, case_id, digest, lead, **{"If-Match": '"3"'}))["version"] == 4
    for event in ("exec_done", "verify_pass"):
        version = data(client.get(f"/case/{case_id}", headers=lead))["version"]
        assert move(client, case_id, event,
                    headers={"If-Match": f'"{version}"', **lead}).status_code == 200
    case = data(client.get(f"/case/{case_id}", headers=lead))
    assert (case["status"], case["version"]) == ("CLOSED", 6)
    assert [row["meta"]["to"] for row in timeline(client, case_id, lead)] == [
        "NEW", "ANALYZING", "PLANNING", "WAIT_GATE", "EXECUTING", "VERIFYING", "CLOSED"]
    assert_error(move(client, case_id, "resume", headers=lead), 409, "illegal_transition")
