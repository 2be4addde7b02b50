"""Who may do what over REST, on SQLite and PostgreSQL: principals named by their bearer token,
writes recorded as the principal (a body's actor only stated), and approvals only by people,
through POST /case/{id}/approve and /reject, under the same policy as Slack buttons."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from core import principals
from core.api import create_api
from core.bootstrap import App
from core.cases.timeline import entry_of
from core.cli import main
from core.db.tables import api_principal, case_timeline, plan_approved, plan_proposed
from core.domain.commands import ApprovePlan
from core.domain.plans import plan_hash
from core.errors import InvalidRequest
from core.ops.export import export_case
from tests.support.apps import make_app
from tests.support.cases import PLAN

SERVICE_TOKEN = "shared-service-token"
LOW_RISK = PLAN  # risk 0.2: one person approves
HIGH_RISK = {**PLAN, "title": "Fail over to the standby region", "risk_score": 0.8}


def build(engine: Engine, **settings: Any) -> App:
    return make_app(engine, **{"api_token": SERVICE_TOKEN, **settings})


@pytest.fixture
def app_options() -> dict[str, Any]:
    return {"api_token": SERVICE_TOKEN}


# -- helpers --------------------------------------------------------------------------------


SERVICE = {"Authorization": f"Bearer {SERVICE_TOKEN}"}


def bearer(engine: Engine, name: str, slack_user: str | None = None,
           role: principals.Role = "approver") -> dict[str, str]:
    _, token = principals.create(engine, name, role, slack_user)
    return {"Authorization": f"Bearer {token}"}


def write(client: TestClient, method: str, path: str, auth: dict[str, str], body: Any,
          key: str | None = None, **headers: str) -> Any:
    return client.request(method, path, json=body,
                          headers={"Idempotency-Key": key or uuid.uuid4().hex, **auth,
                                   **headers})


def error_code(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    return str(response.json()["error"]["code"])


def waiting(client: TestClient, auth: dict[str, str], plan: dict[str, Any] = LOW_RISK,
            actor: str | None = None) -> str:
    """A case opened and brought to the gate by ``auth``'s principal."""
    stated = {} if actor is None else {"actor": actor}
    opened = write(client, "POST", "/case/create", auth, {"title": "checkout 5xx", **stated})
    assert opened.status_code == 201, opened.text
    case_id = str(opened.json()["data"]["case_id"])
    for event, extra in (("start_analysis", {}), ("analysis_done", {}),
                         ("plan_ready", {"plan": plan})):
        moved = write(client, "PATCH", f"/case/{case_id}/transition", auth,
                      {"event": event, **stated, **extra})
        assert moved.status_code == 200, moved.text
    return case_id


def approve(client: TestClient, case_id: str, auth: dict[str, str],
            plan: dict[str, Any] = LOW_RISK, key: str | None = None) -> Any:
    return write(client, "POST", f"/case/{case_id}/approve", auth,
                 {"plan_hash": plan_hash(plan)}, key)


def status(client: TestClient, case_id: str) -> str:
    return str(client.get(f"/case/{case_id}", headers=SERVICE).json()["data"]["status"])


def timeline(engine: Engine, case_id: str) -> list[Any]:
    with engine.connect() as conn:
        query = select(case_timeline).where(case_timeline.c.case_id == UUID(case_id))
        return list(conn.execute(query.order_by(case_timeline.c.id)).mappings())


def decisions(engine: Engine, case_id: str) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        query = select(plan_approved.c.decision).where(plan_approved.c.case_id == UUID(case_id))
        return [dict(row) for row in conn.execute(query).scalars()]


# -- the service token and a body's actor ---------------------------------------------------


def test_the_service_token_cannot_approve_or_reject_by_either_door(client, engine):
    case_id = waiting(client, SERVICE)
    digest = plan_hash(LOW_RISK)
    refused = [
        approve(client, case_id, SERVICE),
        write(client, "POST", f"/case/{case_id}/reject", SERVICE,
              {"plan_hash": digest, "reason": "no"}),
        write(client, "PATCH", f"/case/{case_id}/transition", SERVICE,
              {"event": "gate_approved", "actor": "U0LEAD", "plan_hash": digest}),
        write(client, "PATCH", f"/case/{case_id}/transition", SERVICE,
              {"event": "gate_rejected", "actor": "U0LEAD", "reason": "no"}),
    ]
    assert [error_code(response, 403) for response in refused] == ["forbidden"] * 4
    assert "POST /case/" in refused[2].json()["error"]["message"]
    assert status(client, case_id) == "WAIT_GATE"
    assert decisions(engine, case_id) == []
    assert [row["event"] for row in timeline(engine, case_id)][-1] == "plan_ready"


def test_a_body_actor_naming_an_approver_is_kept_as_stated_and_grants_nothing(client, engine):
    bearer(engine, "lead", "U0LEAD")  # U0LEAD is a real approver
    case_id = waiting(client, SERVICE, actor="U0LEAD")
    rows = timeline(engine, case_id)
    assert {row["actor"] for row in rows} == {"api-token"}
    assert all(row["meta"]["stated_actor"] == "U0LEAD" for row in rows)
    assert all(row["meta"]["principal"] == "api-token" for row in rows)
    assert entry_of(rows[0]).shown_actor == "api-token for U0LEAD"
    forged = write(client, "PATCH", f"/case/{case_id}/transition", SERVICE,
                   {"event": "gate_approved", "actor": "U0LEAD",
                    "plan_hash": plan_hash(LOW_RISK)})
    assert error_code(forged, 403) == "forbidden"
    assert status(client, case_id) == "WAIT_GATE" and decisions(engine, case_id) == []


def test_a_service_principal_even_an_operator_cannot_approve(client, engine):
    ci = bearer(engine, "svc-ci", role="operator")
    case_id = waiting(client, ci, actor="sre@acme")
    assert timeline(engine, case_id)[0]["actor"] == "svc-ci"
    assert timeline(engine, case_id)[0]["meta"]["stated_actor"] == "sre@acme"
    assert "| svc-ci for sre@acme |" in export_case(engine, UUID(case_id))
    error = approve(client, case_id, ci)
    assert error_code(error, 403) == "forbidden"
    assert "only people approve" in error.json()["error"]["message"]


def test_a_principal_with_the_approver_role_but_no_person_cannot_approve(client, engine):
    """A row edited by hand past `opsgate token create`'s check still decides nothing."""
    auth = bearer(engine, "robot", role="operator")
    with engine.begin() as conn:
        conn.execute(api_principal.update().where(api_principal.c.name == "robot")
                     .values(role="approver"))
    case_id = waiting(client, SERVICE)
    assert error_code(approve(client, case_id, auth), 403) == "forbidden"


# -- roles and tokens -----------------------------------------------------------------------


def test_a_reader_reads_but_writing_is_403(client, engine):
    reader = bearer(engine, "dash", role="reader")
    case_id = waiting(client, SERVICE)
    assert client.get(f"/case/{case_id}", headers=reader).status_code == 200
    assert client.get(f"/case/{case_id}/timeline", headers=reader).status_code == 200
    assert client.get("/case", headers=reader).status_code == 200
    assert error_code(write(client, "POST", "/case/create", reader, {"title": "x"}), 403) == \
        "forbidden"
    moved = write(client, "PATCH", f"/case/{case_id}/transition", reader, {"event": "resume"})
    assert error_code(moved, 403) == "forbidden"
    assert error_code(approve(client, case_id, reader), 403) == "forbidden"
    assert status(client, case_id) == "WAIT_GATE"


def test_a_revoked_token_is_401_from_then_on(client, engine):
    lead = bearer(engine, "lead", "U0LEAD")
    assert write(client, "POST", "/case/create", lead, {"title": "x"}).status_code == 201
    assert principals.revoke(engine, "lead") is True
    assert principals.revoke(engine, "lead") is False  # already
    assert error_code(write(client, "POST", "/case/create", lead, {"title": "x"}), 401) == \
        "unauthorized"
    assert error_code(client.get("/case", headers=lead), 401) == "unauthorized"


@pytest.mark.parametrize("token", ["og_not-a-token", SERVICE_TOKEN + "x", "", "og_"])
def test_an_unknown_token_is_401(client, engine, token):
    bearer(engine, "lead", "U0LEAD")
    auth = {"Authorization": f"Bearer {token}"}
    response = write(client, "POST", "/case/create", auth, {"title": "x"})
    assert error_code(response, 401) == "unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"
    assert error_code(client.get("/case", headers=auth), 401) == "unauthorized"


def test_token_hashes_only_are_in_the_database(engine):
    kinds: list[tuple[principals.Role, str | None]] = [
        ("reader", None), ("operator", None), ("approver", "U0LEAD")]
    made = [principals.create(engine, f"p{n}", role, slack)
            for n, (role, slack) in enumerate(kinds)]
    with engine.connect() as conn:
        stored = [dict(row) for row in conn.execute(select(api_principal)).mappings()]
    text = json.dumps(stored, default=str)
    for principal, token in made:
        assert token.startswith(principals.TOKEN_PREFIX) and len(token) > 40
        assert token not in text and token[len(principals.TOKEN_PREFIX):] not in text
        row = next(row for row in stored if row["name"] == principal.name)
        assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()


@pytest.mark.parametrize(
    ("name", "role", "slack_user", "says"),
    [("lead", "approver", None, "an approver is a person"),
     ("Lead", "operator", None, "not a principal name"),
     ("U0LEAD", "operator", None, "not a principal name"),
     ("gatekeeper", "operator", None, "opsgate itself writes as"),
     ("api-token", "operator", None, "opsgate itself writes as"),
     ("alertmanager", "operator", None, "opsgate itself writes as"),
     ("local-operator", "operator", None, "opsgate itself writes as"),
     ("lead", "approver", "lead@acme", "not a Slack user id")])
def test_principals_that_would_blur_identities_are_refused(engine, name, role, slack_user,
                                                           says):
    with pytest.raises(InvalidRequest, match=says):
        principals.create(engine, name, role, slack_user)
    assert principals.records(engine) == []


def test_a_name_is_never_given_out_twice(engine):
    principals.create(engine, "lead", "approver", "U0LEAD")
    principals.revoke(engine, "lead")
    with pytest.raises(InvalidRequest, match="never reused"):
        principals.create(engine, "lead", "approver", "U0LEAD")


# -- reads ----------------------------------------------------------------------------------


def test_reads_need_a_token_once_a_principal_exists(engine):
    app = build(engine, api_token=None)
    try:
        with TestClient(create_api(app), base_url="http://localhost") as client:
            assert client.get("/case").status_code == 200  # nothing configured: open
            reader = bearer(engine, "dash", role="reader")
            assert error_code(client.get("/case"), 401) == "unauthorized"
            assert client.get("/case", headers=reader).status_code == 200
            assert error_code(client.post("/case/create", json={"title": "x"},
                                          headers={"Idempotency-Key": "k1"}), 401) == \
                "unauthorized"
            assert client.get("/healthz").status_code == 200
            principals.revoke(engine, "dash")
            assert client.get("/case").status_code == 200  # no live token: open again
    finally:
        app.close()


def test_the_service_token_alone_closes_reads(client):
    assert error_code(client.get("/case"), 401) == "unauthorized"
    assert client.get("/case", headers=SERVICE).status_code == 200


def test_reads_open_keeps_reads_open_but_not_writes(engine):
    app = build(engine, api_reads="open")
    try:
        with TestClient(create_api(app), base_url="http://localhost") as client:
            case_id = waiting(client, SERVICE)
            assert client.get(f"/case/{case_id}").status_code == 200
            assert client.get(f"/case/{case_id}/timeline").status_code == 200
            assert error_code(client.get("/case", headers={"Authorization": "Bearer nope"}),
                              401) == "unauthorized"
            assert error_code(client.post("/case/create", json={"title": "x"},
                                          headers={"Idempotency-Key": "k2"}), 401) == \
                "unauthorized"
    finally:
        app.close()


# -- approvals over REST --------------------------------------------------------------------


def test_an_approver_approves_over_rest_and_the_case_moves_per_policy(client, engine):
    lead = bearer(engine, "lead", "U0LEAD")
    case_id = waiting(client, SERVICE)
    key = uuid.uuid4().hex
    approved = approve(client, case_id, lead, key=key)
    data = approved.json()["data"]
    assert (approved.status_code, data["status"], data["version"]) == (200, "EXECUTING", 4)
    assert data["approval"] == {"state": "approved", "approvers": ["U0LEAD"], "needs": 0,
                                "recorded": True, "reason": "approved by U0LEAD"}
    assert approved.headers["etag"] == '"4"'
    last = timeline(engine, case_id)[-1]
    assert (last["event"], last["actor"], last["meta"]["principal"]) == (
        "gate_approved", "U0LEAD", "lead")
    assert [d["approver"] for d in decisions(engine, case_id)] == ["U0LEAD"]
    again = approve(client, case_id, lead, key=key)
    assert (again.status_code, again.content) == (200, approved.content)
    assert again.headers["idempotent-replayed"] == "true"


def test_an_approval_without_a_key_or_plan_hash_is_refused(client, engine):
    lead = bearer(engine, "lead", "U0LEAD")
    case_id = waiting(client, SERVICE)
    no_key = client.post(f"/case/{case_id}/approve", json={"plan_hash": plan_hash(LOW_RISK)},
                         headers=lead)
    assert error_code(no_key, 400) == "bad_request"
    no_hash = write(client, "POST", f"/case/{case_id}/approve", lead, {})
    assert error_code(no_hash, 422) == "invalid_request"
    stale = write(client, "POST", f"/case/{case_id}/approve", lead,
                  {"plan_hash": plan_hash(LOW_RISK)}, **{"If-Match": '"1"'})
    assert error_code(stale, 412) == "version_conflict"
    assert status(client, case_id) == "WAIT_GATE"


def test_the_requester_cannot_approve_their_own_plan_over_rest(client, engine):
    lead = bearer(engine, "lead", "U0LEAD")
    case_id = waiting(client, lead)  # lead opened the case and proposed the plan
    refused = approve(client, case_id, lead)
    assert error_code(refused, 422) == "approval_refused"
    assert "U0LEAD requested this plan" in refused.json()["error"]["message"]
    audit = timeline(engine, case_id)[-1]
    assert (audit["event"], audit["actor"], audit["meta"]["outcome"]) == (
        "plan_approval", "U0LEAD", "refused")
    assert status(client, case_id) == "WAIT_GATE"


def moved_to_the_gate(client: TestClient, case_id: str, auth: dict[str, str],
                      actor: str | None = None) -> None:
    """``case_id`` brought to the gate with ``LOW_RISK`` by ``auth``'s principal, stating
    ``actor`` on each move when given."""
    stated = {} if actor is None else {"actor": actor}
    for event, extra in (("start_analysis", {}), ("analysis_done", {}),
                         ("plan_ready", {"plan": LOW_RISK})):
        moved = write(client, "PATCH", f"/case/{case_id}/transition", auth,
                      {"event": event, **stated, **extra})
        assert moved.status_code == 200, moved.text


@pytest.mark.parametrize("asked_by", ["opened the case", "was the token's stated actor"])
def test_whoever_asked_for_a_plan_a_token_proposed_cannot_approve_it(client, engine, asked_by):
    """The requester is everyone who asked: the person who opened the case, and the person a
    service token said it proposed the plan for, even though the stated actor grants nothing.
    Another approver still may."""
    kim, lead = bearer(engine, "kim", "U0KIM"), bearer(engine, "lead", "U0LEAD")
    opener = kim if asked_by == "opened the case" else SERVICE
    opened = write(client, "POST", "/case/create", opener, {"title": "checkout 5xx"})
    assert opened.status_code == 201, opened.text
    case_id = str(opened.json()["data"]["case_id"])
    moved_to_the_gate(client, case_id, SERVICE,
                      actor="U0KIM" if asked_by == "was the token's stated actor" else None)
    [proposed] = [row for row in timeline(engine, case_id) if row["event"] == "plan_ready"]
    assert proposed["actor"] == "api-token"  # the token proposed: kim is no proposer
    refused = approve(client, case_id, kim)
    assert error_code(refused, 422) == "approval_refused"
    assert "U0KIM requested this plan" in refused.json()["error"]["message"]
    assert status(client, case_id) == "WAIT_GATE" and decisions(engine, case_id) == []
    approved = approve(client, case_id, lead)
    assert approved.status_code == 200, approved.text
    assert [d["approver"] for d in decisions(engine, case_id)] == ["U0LEAD"]


def test_a_plan_requested_in_slack_cannot_be_approved_by_the_same_person_over_rest(
        app, client, engine):
    """The plan_ready by the agent names the Slack user as requester; their REST token is the
    same person."""
    lead = bearer(engine, "lead", "U0LEAD")
    case_id = waiting(client, SERVICE)
    with engine.begin() as conn:  # as the agent records a plan asked for by a Slack user
        conn.execute(plan_proposed.update().where(plan_proposed.c.case_id == UUID(case_id))
                     .values(proposed_by="U0LEAD"))
    assert error_code(approve(client, case_id, lead), 422) == "approval_refused"


@pytest.mark.parametrize("slack_first", [True, False])
def test_one_person_through_slack_and_rest_counts_once_on_a_two_person_plan(
        app, client, engine, slack_first):
    lead, kim = bearer(engine, "lead", "U0LEAD"), bearer(engine, "kim", "U0KIM")
    case_id = waiting(client, SERVICE, plan=HIGH_RISK)

    def click() -> dict[str, Any]:  # what the bot's Approve button sends the core
        cmd = ApprovePlan(UUID(case_id), plan_hash(HIGH_RISK), "U0LEAD",
                          correlation_id="slack-click", expected_version=3)
        reply = app.cases.approve_plan(cmd, f"slack:approve:a1:U0LEAD:{uuid.uuid4().hex}")
        return dict(reply.data()["approval"])

    def rest() -> dict[str, Any]:
        response = approve(client, case_id, lead, HIGH_RISK)
        assert response.status_code == 200, response.text
        return dict(response.json()["data"]["approval"])

    first, second = (click(), rest()) if slack_first else (rest(), click())
    assert (first["state"], first["needs"], first["recorded"]) == ("pending", 1, True)
    assert (second["state"], second["needs"], second["recorded"]) == ("pending", 1, False)
    assert status(client, case_id) == "WAIT_GATE"
    assert [d["approver"] for d in decisions(engine, case_id)] == ["U0LEAD"]
    done = approve(client, case_id, kim, HIGH_RISK).json()["data"]
    assert done["status"] == "EXECUTING"
    assert sorted(done["approval"]["approvers"]) == ["U0KIM", "U0LEAD"]


def test_two_people_over_rest_approve_a_two_person_plan(client, engine):
    lead, kim = bearer(engine, "lead", "U0LEAD"), bearer(engine, "kim", "U0KIM")
    case_id = waiting(client, SERVICE, plan=HIGH_RISK)
    assert approve(client, case_id, lead, HIGH_RISK).json()["data"]["approval"]["needs"] == 1
    assert approve(client, case_id, lead, HIGH_RISK).json()["data"]["status"] == "WAIT_GATE"
    assert approve(client, case_id, kim, HIGH_RISK).json()["data"]["status"] == "EXECUTING"


def test_an_approver_off_the_approver_list_is_refused_like_in_slack(engine):
    app = build(engine, approvers=["U0KIM"])
    try:
        with TestClient(create_api(app), base_url="http://localhost") as client:
            lead = bearer(engine, "lead", "U0LEAD")
            case_id = waiting(client, SERVICE)
            refused = approve(client, case_id, lead)
            assert error_code(refused, 422) == "approval_refused"
            assert "U0LEAD is not an approver" in refused.json()["error"]["message"]
    finally:
        app.close()


def test_an_approver_rejects_over_rest_with_a_reason(client, engine):
    lead = bearer(engine, "lead", "U0LEAD")
    case_id = waiting(client, SERVICE)
    path = f"/case/{case_id}/reject"
    no_reason = write(client, "POST", path, lead, {"plan_hash": plan_hash(LOW_RISK)})
    assert error_code(no_reason, 422) == "invalid_request"
    blank = write(client, "POST", path, lead, {"plan_hash": plan_hash(LOW_RISK), "reason": " "})
    assert error_code(blank, 422) == "invalid_request"
    parked = write(client, "POST", path, lead,
                   {"plan_hash": plan_hash(LOW_RISK), "reason": "wrong region"})
    assert parked.json()["data"]["status"] == "PARKED", parked.text
    last = timeline(engine, case_id)[-1]
    assert (last["event"], last["actor"], last["reason"]) == (
        "gate_rejected", "U0LEAD", "wrong region")


# -- opsgate token --------------------------------------------------------------------------


def test_the_token_command_creates_lists_and_revokes(engine, capsys):
    url = ["--database-url", engine.url.render_as_string(hide_password=False)]
    assert main(["token", "create", "lead", "--role", "approver", "--slack-user", "U0LEAD",
                 *url]) == 0
    created = capsys.readouterr()
    token = created.out.strip()
    assert token.startswith("og_") and "\n" not in token
    assert "lead (approver, person, Slack U0LEAD)" in created.err and "shown once" in created.err
    assert principals.authenticate(engine, token, None) == principals.Principal(
        "lead", "approver", "U0LEAD")
    assert main(["token", "create", "svc-ci", *url]) == 0
    capsys.readouterr()

    assert main(["token", "list", *url]) == 0
    listed = capsys.readouterr().out
    lines = listed.splitlines()
    assert lines[0].split() == ["NAME", "ROLE", "KIND", "SLACK", "USER", "CHANNELS", "CREATED",
                                "REVOKED"]
    assert lines[1].split()[:5] == ["lead", "approver", "person", "U0LEAD", "all"]
    assert lines[2].split()[:5] == ["svc-ci", "operator", "service", "-", "all"]
    assert lines[1].split()[-1] == "-"
    assert token not in listed and principals.token_hash(token) not in listed

    assert main(["token", "revoke", "lead", *url]) == 0
    assert capsys.readouterr().out.strip() == "token: lead revoked"
    assert principals.authenticate(engine, token, None) is None
    assert main(["token", "list", *url]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-1] != "-"


def test_creating_an_existing_name_fails_in_one_line_naming_rotate_and_prints_no_token(
        engine, capsys):
    """``AUTH="Bearer $(opsgate token create svc-ci)"`` run twice: the second exits non-zero
    with one line saying how to rotate, and stdout stays empty (never a blank token)."""
    url = ["--database-url", engine.url.render_as_string(hide_password=False)]
    assert main(["token", "create", "svc-ci", *url]) == 0
    first = capsys.readouterr().out.strip()

    assert main(["token", "create", "svc-ci", *url]) == 1
    again = capsys.readouterr()
    assert again.out == ""
    errors = [line for line in again.err.splitlines() if line.startswith("opsgate: error:")]
    assert errors == ["opsgate: error: a principal named svc-ci exists: `opsgate token create "
                      "svc-ci --rotate` gives it a new token and ends the old one"]
    assert principals.authenticate(engine, first, None) == principals.Principal(
        "svc-ci", "operator")


def test_rotate_gives_a_new_token_and_ends_the_old_one(engine, capsys):
    url = ["--database-url", engine.url.render_as_string(hide_password=False)]
    assert main(["token", "create", "lead", "--role", "approver", "--slack-user", "U0LEAD",
                 *url]) == 0
    old = capsys.readouterr().out.strip()
    assert main(["token", "create", "lead", "--rotate", *url]) == 0
    rotated = capsys.readouterr()
    new = rotated.out.strip()
    assert new.startswith("og_") and new != old
    assert "rotated lead (approver, person, Slack U0LEAD)" in rotated.err
    assert principals.authenticate(engine, old, None) is None
    assert principals.authenticate(engine, new, None) == principals.Principal(
        "lead", "approver", "U0LEAD")
    assert [record.principal.name for record in principals.records(engine)] == ["lead"]


@pytest.mark.parametrize(("argv", "says"), [
    (["nobody", "--rotate"], "no principal named nobody to rotate"),
    (["lead", "--rotate", "--role", "operator"], "lead is an approver (Slack U0LEAD): rotating "
                                                 "keeps who it is"),
    (["lead", "--rotate", "--slack-user", "U0OTHER"], "rotating keeps who it is"),
    (["gone", "--rotate"], "gone was revoked, and names are never reused"),
    (["gone"], "gone was revoked, and names are never reused: create another name")])
def test_rotate_refuses_what_it_cannot_do(engine, capsys, argv, says):
    url = ["--database-url", engine.url.render_as_string(hide_password=False)]
    _, lead = principals.create(engine, "lead", "approver", "U0LEAD")
    principals.create(engine, "gone", "reader")
    principals.revoke(engine, "gone")
    capsys.readouterr()
    assert main(["token", "create", *argv, *url]) == 1
    refused = capsys.readouterr()
    assert refused.out == "" and says in refused.err
    assert principals.authenticate(engine, lead, None) == principals.Principal(
        "lead", "approver", "U0LEAD")


def test_the_token_command_refuses_what_it_cannot_do(engine, capsys):
    url = ["--database-url", engine.url.render_as_string(hide_password=False)]
    assert main(["token", "create", "lead", "--role", "approver", *url]) == 1
    assert "an approver is a person" in capsys.readouterr().err
    assert main(["token", "revoke", "nobody", *url]) == 1
    assert "no principal named nobody" in capsys.readouterr().err
    assert principals.records(engine) == []
