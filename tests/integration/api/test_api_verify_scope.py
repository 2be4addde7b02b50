"""A verify check must measure the service (issue 40), on SQLite and PostgreSQL: with Prometheus
configured and a case naming ``payments-api``, ``{"metric": "vector(0)", "below": 1}`` and a
selector outside the component are refused before the gate, in one sentence, through the REST
transition and the agent's ``propose_plan``; nothing reaches the gate. A check of the
component's series is admitted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import ToolMessage
from sqlalchemy import Engine

from agent.scripted import ScriptedChatModel
from core.domain.fsm import CaseStatus
from tests.support.agents import agent_app, ai, call, case_at, make_agent
from tests.support.api import assert_error, bearer, data, new_key
from tests.support.cases import PLAN

EXAMPLES = Path(__file__).parents[3] / "docs" / "examples"
NOWHERE = "http://127.0.0.1:9"  # plan_ready sends no query: no Prometheus need listen
MEASURES_NOTHING = {"metric": "vector(0)", "below": 1}
UNSCOPED = {"metric": "http_5xx_ratio", "below": 0.01}
OTHER_COMPONENT = {"metric": 'http_5xx_ratio{service="search-api"}', "below": 0.01}
OWN = {"metric": 'http_5xx_ratio{service="payments-api"}', "below": 0.01}
NO_SERIES = ("the plan's verify query would not be sent to Prometheus: verify.metric: refused: "
             "the query reads no series: a constant or a function of constants (vector(0), "
             "time(), 1 + 1) measures nothing; select the component's series, with "
             'service="payments-api"')
OUTSIDE = ('the plan\'s verify query would not be sent to Prometheus: verify.metric: refused: '
           'add service="payments-api" to http_5xx_ratio: ')


@pytest.fixture
def app_options(tmp_path: Path) -> dict[str, Any]:
    catalog = tmp_path / "catalog"
    shutil.copytree(EXAMPLES / "catalog", catalog)
    return {"catalog": catalog, "prometheus_url": NOWHERE}


def planning_case(client: TestClient, auth: dict[str, str]) -> str:
    opened = client.post("/case/create", json={"title": "payments 5xx",
                                               "components": ["payments-api"]},
                         headers={**auth, "Idempotency-Key": new_key()})
    case_id = str(data(opened, 201)["case_id"])
    for event in ("start_analysis", "analysis_done"):
        data(propose(client, auth, case_id, {"event": event}))
    return case_id


def propose(client: TestClient, auth: dict[str, str], case_id: str,
            body: dict[str, Any]) -> Any:
    return client.patch(f"/case/{case_id}/transition", json=body,
                        headers={**auth, "Idempotency-Key": new_key()})


def test_rest_refuses_a_check_that_measures_nothing_before_the_gate(client, engine):
    auth = bearer(engine, "ops", None, "operator")
    case_id = planning_case(client, auth)

    refusals = [assert_error(propose(client, auth, case_id, {
        "event": "plan_ready", "plan": {**PLAN, "verify": verify}}), 422, "guard_failed")
        for verify in (MEASURES_NOTHING, UNSCOPED, OTHER_COMPONENT)]

    nothing, unscoped, other = (body["message"] for body in refusals)
    assert nothing == NO_SERIES
    assert unscoped.startswith(OUTSIDE) and other.startswith(OUTSIDE)
    assert 'reads service="search-api"' in other
    assert all("\n" not in message for message in (nothing, unscoped, other))
    case = data(client.get(f"/case/{case_id}", headers=auth))
    assert case["status"] == CaseStatus.PLANNING  # nothing came to the gate

    admitted = propose(client, auth, case_id, {"event": "plan_ready",
                                               "plan": {**PLAN, "verify": OWN}})
    assert data(admitted)["status"] == CaseStatus.WAIT_GATE


def test_the_agent_s_proposal_is_refused_before_the_gate_in_one_sentence(engine: Engine,
                                                                         tmp_path: Path):
    catalog = tmp_path / "catalog"
    shutil.copytree(EXAMPLES / "catalog", catalog)
    app = agent_app(engine, catalog=catalog, prometheus_url=NOWHERE)
    case_id = case_at(app, CaseStatus.PLANNING)
    model = ScriptedChatModel(turns=[
        ai(call("name_components", "t-1", case_id=str(case_id), components=["payments-api"]),
           call("propose_plan", "t-2", case_id=str(case_id),
                plan={**PLAN, "verify": MEASURES_NOTHING}),
           call("propose_plan", "t-3", case_id=str(case_id), plan={**PLAN, "verify": UNSCOPED}),
           call("propose_plan", "t-4", case_id=str(case_id), plan={**PLAN, "verify": OWN})),
        ai(content="proposed"),
    ])
    turn = make_agent(app, model).run_turn(case_id, "plan it", requester="U0ERIN",
                                           correlation_id="c", trigger="chat")
    assert turn.outcome == "answered"
    answers = [json.loads(str(m.content)) for m in model.seen[-1]
               if isinstance(m, ToolMessage)]
    _named, nothing, unscoped, own = answers
    assert (nothing["status"], nothing["error"]["message"]) == ("refused", NO_SERIES)
    assert unscoped["status"] == "refused"
    assert unscoped["error"]["message"].startswith(OUTSIDE)
    assert own["status"] == "ok"
    app.close()
