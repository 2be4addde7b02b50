"""A principal scoped to channels (``opsgate token create NAME --channel C…``) reads and writes
only the cases whose thread is in one of them (issue 24, finding 3, REST): any other case
answers 404 exactly as an unknown case does, and lists leave it out; unscoped tokens keep
today's behaviour."""

from __future__ import annotations

import itertools
import uuid
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from core import principals
from core.bootstrap import App
from core.cli import main
from core.domain.commands import ChatThread, OpenCase
from core.domain.plans import plan_hash
from tests.support.cases import PLAN

MINE, THEIRS = "C0MINE", "C0THEIRS"
SERVICE_TOKEN = "shared-service-token"
THREADS = itertools.count(1)


@pytest.fixture
def app_options() -> dict[str, Any]:
    return {"api_token": SERVICE_TOKEN}


def case_in_channel(app: App, channel: str | None, title: str) -> str:
    ts = f"1700000000.{next(THREADS):06d}"
    thread = None if channel is None else ChatThread("T0001", channel, ts)
    opened = app.cases.open_case(OpenCase(title=title, actor="U0ALICE", thread=thread),
                                 uuid.uuid4().hex)
    return str(opened.data()["case_id"])


def bearer(engine: Engine, name: str, role: principals.Role = "reader",
           slack_user: str | None = None,
           channels: list[str] | None = None) -> dict[str, str]:
    _, token = principals.create(engine, name, role, slack_user, channels=channels)
    return {"Authorization": f"Bearer {token}"}


def write(client: TestClient, method: str, path: str, auth: dict[str, str],
          body: Any) -> Any:
    return client.request(method, path, json=body,
                          headers={"Idempotency-Key": uuid.uuid4().hex, **auth})


def unknown_like(response: Any, case_id: str, client: TestClient, auth: dict[str, str],
                 path: str) -> None:
    """``response`` is the 404 an unknown case id gets at ``path``, word for word."""
    assert response.status_code == 404, response.text
    unknown = str(UUID(int=0xABCDEF))
    other = client.get(path.replace(case_id, unknown), headers=auth)
    assert other.status_code == 404, other.text
    assert response.text.replace(case_id, unknown) == other.text


def test_a_scoped_reader_sees_only_its_channels_cases(client: TestClient, app: App,
                                                      engine: Engine) -> None:
    mine = case_in_channel(app, MINE, "checkout 5xx in my channel")
    theirs = case_in_channel(app, THEIRS, "payroll export stuck (another team's)")
    nowhere = case_in_channel(app, None, "opened over REST, no thread")
    scoped = bearer(engine, "team-dash", channels=[MINE])

    assert client.get(f"/case/{mine}", headers=scoped).status_code == 200
    assert client.get(f"/case/{mine}/timeline", headers=scoped).status_code == 200
    listed = client.get("/case", headers=scoped).json()["data"]
    assert [case["case_id"] for case in listed] == [mine]
    for other in (theirs, nowhere):
        for path in (f"/case/{other}", f"/case/{other}/timeline"):
            unknown_like(client.get(path, headers=scoped), other, client, scoped, path)
    assert "payroll" not in client.get("/case?status=NEW", headers=scoped).text

    everyone = bearer(engine, "all-dash")  # unscoped: today's behaviour
    assert {c["case_id"] for c in client.get("/case", headers=everyone).json()["data"]} == \
        {mine, theirs, nowhere}
    assert client.get(f"/case/{theirs}", headers=everyone).status_code == 200


def test_a_scoped_operator_cannot_write_outside_its_channels(client: TestClient, app: App,
                                                             engine: Engine) -> None:
    theirs = case_in_channel(app, THEIRS, "payroll export stuck (another team's)")
    mine = case_in_channel(app, MINE, "checkout 5xx in my channel")
    scoped = bearer(engine, "team-bot", "operator", channels=[MINE])
    lead = bearer(engine, "team-lead", "approver", "U0LEAD", channels=[MINE])

    for path, body, auth in (
            (f"/case/{theirs}/transition", {"event": "start_analysis"}, scoped),
            (f"/case/{theirs}/approve", {"plan_hash": plan_hash(PLAN)}, lead),
            (f"/case/{theirs}/reject", {"plan_hash": plan_hash(PLAN), "reason": "no"}, lead)):
        method = "PATCH" if path.endswith("transition") else "POST"
        refused = write(client, method, path, auth, body)
        assert refused.status_code == 404, refused.text
        assert f"no case {theirs}" in refused.text and "payroll" not in refused.text
    for path in ("/plan/generate", "/gate/eval", "/verify/run"):
        body = {"case_id": theirs, "template": "k8s.rollout.canary"} \
            if path == "/plan/generate" else {"case_id": theirs}
        refused = write(client, "POST", path, scoped, body)
        assert refused.status_code == 404, (path, refused.text)
        assert f"no case {theirs}" in refused.text
    assert [row["event"] for row in app.cases.timeline(UUID(theirs))] == ["case_opened"]

    moved = write(client, "PATCH", f"/case/{mine}/transition", scoped,
                  {"event": "start_analysis"})
    assert moved.status_code == 200, moved.text


def test_the_token_command_scopes_a_token_to_channels(engine: Engine, app: App,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    url = ["--database-url", engine.url.render_as_string(hide_password=False)]
    assert main(["token", "create", "team-dash", "--role", "reader", "--channel", MINE,
                 "--channel", "G0PRIVATE", *url]) == 0
    made = capsys.readouterr()
    assert "only the cases of C0MINE, G0PRIVATE" in made.err
    assert principals.authenticate(engine, made.out.strip(), None) == principals.Principal(
        "team-dash", "reader", channels=frozenset({MINE, "G0PRIVATE"}))

    assert main(["token", "list", *url]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:5] == [
        "team-dash", "reader", "service", "-", "C0MINE,G0PRIVATE"]

    assert main(["token", "create", "team-dash", "--rotate", *url]) == 0  # keeps its scope
    rotated = capsys.readouterr().out.strip()
    assert principals.authenticate(engine, rotated, None) == principals.Principal(
        "team-dash", "reader", channels=frozenset({MINE, "G0PRIVATE"}))
    assert main(["token", "create", "team-dash", "--rotate", "--channel", THEIRS, *url]) == 1
    assert "rotating keeps who it is" in capsys.readouterr().err

    assert main(["token", "create", "bad", "--channel", "#incidents", *url]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert errors == ["opsgate: error: '#incidents' is not a Slack channel id (e.g. C012AB3CD)"]


def test_a_scope_edited_by_hand_into_nonsense_sees_nothing(client: TestClient, app: App,
                                                           engine: Engine) -> None:
    from sqlalchemy import update

    from core.db.tables import api_principal

    mine = case_in_channel(app, MINE, "checkout 5xx in my channel")
    scoped = bearer(engine, "team-dash", channels=[MINE])
    with engine.begin() as conn:
        conn.execute(update(api_principal).where(api_principal.c.name == "team-dash")
                     .values(scope={"channels": "C0MINE"}))
    assert client.get(f"/case/{mine}", headers=scoped).status_code == 404
    assert client.get("/case", headers=scoped).json()["data"] == []
