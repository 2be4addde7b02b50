"""The investigator's eyes end to end (issue 28), on SQLite and on PostgreSQL with the gateway's
Redis. The analyst notes the component's last change and its firing alerts. A scripted model's
looks at payments-api are answered by Debian's real Prometheus (a recorded history, promtool)
and Alertmanager, and by the recorded Kubernetes world through the official client; changes
posted to ``POST /changes`` in each of the three formats (each twice) appear once in
``recent_changes`` and the last one before the case on its card; a look at another service is
refused; an oversized answer is cut to its budget; text injected in logs, events and change
descriptions causes nothing."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import ToolMessage
from sqlalchemy import Engine

from agent.scripted import ScriptedChatModel
from agent.world.kube_objects import BUSY_POD, INJECTED, INJECTED_POD
from bot.card import card_message
from bot.card_keeper import CardKeeper
from core.api import create_api
from core.consumers.analyst import Analyst
from core.consumers.planner import Planner
from core.domain.fsm import CaseStatus
from core.domain.messages import Topic
from core.investigate.progress import LookSeen
from core.messaging.consumer import ConsumerRunner
from tests.support.agents import agent_app, ai, call, case_at, events, make_agent
from tests.support.change_deliveries import (
    INJECTED as CHANGE_INJECTED,
)
from tests.support.change_deliveries import (
    TOKEN,
    argo_app,
    argocd_delivery,
    generic,
    github_delivery,
    github_event,
    post,
)
from tests.support.kube_world import KubeWorldServer, kube_world  # noqa: F401
from tests.support.peers import Alertmanager, Prometheus
from tests.support.plan_runs import envelope_of
from tests.support.servers import REDIS_URL

CATALOG = Path(__file__).parents[3] / "docs" / "examples" / "catalog"
REQUESTER = "U0ERIN"
STEP_S = 15
RATIO = 'http_5xx_ratio{service="payments-api"}'
NOWHERE = "http://127.0.0.1:9/hook"  # Alertmanager's receiver: never reached (group_wait 1h)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def history(end: int, deployed: int) -> str:
    """Two hours of payments-api's 5xx ratio (stepping up at the deploy) and orders-api's."""
    lines = ["# TYPE http_5xx_ratio gauge"]
    for labels, value in (('service="payments-api"', lambda t: 0.2 if t >= deployed else 0.01),
                          ('service="orders-api"', lambda t: 0.02)):
        lines += [f"http_5xx_ratio{{{labels}}} {value(t)} {t}"
                  for t in range(end - 7200, end + 1, STEP_S)]
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(params=["sqlite", "postgres+redis"])
def world(request: pytest.FixtureRequest, prometheus_server: Callable[..., Prometheus],
          alertmanager_server: Callable[..., Alertmanager],
          kube_world: Callable[..., KubeWorldServer]) -> dict[str, Any]:  # noqa: F811
    """The servers, and the settings of one database (PostgreSQL runs with Redis)."""
    end = int(time.time() // 60 * 60) - 60
    deployed = end - 40 * 60 + 60  # forty minutes ago, as the recorded world's deploy
    prometheus = prometheus_server([], history=history(end, deployed))
    alertmanager = alertmanager_server(NOWHERE, "token", group_wait="1h")
    now = datetime.now(UTC)
    alertmanager.post_alerts([
        {"labels": {"alertname": "PaymentsErrors", "service": "payments-api",
                    "severity": "critical"},
         "annotations": {"summary": f"5xx over 20% {INJECTED}"},
         "startsAt": iso(now - timedelta(minutes=30)), "endsAt": iso(now + timedelta(hours=1))},
        {"labels": {"alertname": "OrdersDown", "service": "orders-api", "severity": "critical"},
         "annotations": {"summary": "orders-api is down"},
         "startsAt": iso(now - timedelta(minutes=5)), "endsAt": iso(now + timedelta(hours=1))},
    ])
    kube = kube_world()
    settings: dict[str, Any] = {
        "catalog": str(CATALOG), "prometheus_url": prometheus.base_url,
        "alertmanager_url": alertmanager.base_url, "kubeconfig": str(kube.config),
        "changes_token": TOKEN, "tool_result_tokens": 1000, "approvers": []}
    if request.param == "sqlite":
        return {"engine": request.getfixturevalue("sqlite_engine"), "kube": kube, **settings}
    prefix = request.getfixturevalue("redis_prefix")
    return {"engine": request.getfixturevalue("pg_engine"), "kube": kube, **settings,
            "redis_url": REDIS_URL, "gateway_key_prefix": f"{prefix}gw:"}


def post_changes(app: Any, now: datetime) -> None:
    """A deploy by CI an hour ago, Argo CD's sync 41 minutes ago and GitHub's deploy forty
    minutes ago (its description carries injected text), each delivered twice."""
    deliveries = [
        (json.dumps(generic(id="ci-payments-api-1", version="v2.3.9",
                            at=iso(now - timedelta(hours=1)), target="deployment/payments-api",
                            before="v2.3.8", after="v2.3.9")).encode(),
         {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}),
        argocd_delivery(argo_app("3c1f0e2", iso(now - timedelta(minutes=41)),
                                 {"username": "dana"})),
        github_delivery(github_event(description=CHANGE_INJECTED[:140],
                                     at=iso(now - timedelta(minutes=40)))),
    ]
    with TestClient(create_api(app), base_url="http://localhost") as http:
        for delivery in deliveries:
            assert post(http, delivery).status_code == 201
            assert post(http, delivery).status_code == 200


@dataclass
class ShownLooks:
    """An ``Investigation`` that keeps what it is shown."""

    looks: list[LookSeen] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    ends: int = 0

    def look(self, seen: LookSeen) -> None:
        self.looks.append(seen)

    def found(self, summary: str) -> None:
        self.findings.append(summary)

    def ended(self) -> None:
        self.ends += 1


def answers(model: ScriptedChatModel) -> dict[str, dict[str, Any]]:
    """The tool answers of the model's last call, by tool call id."""
    return {str(m.tool_call_id): json.loads(str(m.content)) for m in model.seen[-1]
            if isinstance(m, ToolMessage)}


def test_the_model_s_looks_are_answered_by_the_real_servers_within_scope_and_budget(
        world: dict[str, Any]) -> None:
    engine: Engine = world.pop("engine")
    kube: KubeWorldServer = world.pop("kube")
    app = agent_app(engine, **world)
    case_id = case_at(app, CaseStatus.PLANNING, "payments are failing since the deploy")
    app.cases.name_components(case_id, ["payments-api"], "alertmanager", "named").data()
    now = datetime.now(UTC)
    post_changes(app, now)
    model = ScriptedChatModel(turns=[
        ai(call("query_metrics", "range", query=RATIO, start=iso(now - timedelta(hours=2)),
                end=iso(now), step_s=60),
           call("query_metrics", "orders", query='http_5xx_ratio{service="orders-api"}'),
           call("list_alerts", "alerts"),
           call("kube_objects", "pods", kind="pods"),
           call("pod_logs", "injected", pod=INJECTED_POD, container="api"),
           call("pod_logs", "busy", pod=BUSY_POD, lines=500),
           call("kube_events", "events"),
           call("recent_changes", "changes"),
           call("plan_template", "rollback", template="k8s.rollout.canary"),
           call("query_metrics", "range-again", query=RATIO,
                start=iso(now - timedelta(hours=2)), end=iso(now), step_s=60)),
        ai(content="I looked; a human decides."),
    ])
    shown = ShownLooks()
    app.extensions = replace(app.extensions, investigation=lambda _app, _case: shown)
    watched: list[str] = []
    turn = make_agent(app, model).run_turn(case_id, "what is wrong?", requester=REQUESTER,
                                           correlation_id="c", trigger="chat",
                                           watch=watched.append)
    assert turn.outcome == "answered"
    # What the thread's status line was told, look by look (a replayed look is not told again).
    window = f"{now - timedelta(hours=2):%H:%M} to {now:%H:%M}"
    assert watched[0] == f"querying http_5xx_ratio for payments-api, {window}"
    assert "reading the logs of pod " + INJECTED_POD in watched
    assert len(watched) == 9
    said = answers(model)

    # The investigation as the thread shows it (issue 45): each look started, then ended with
    # the gist of the real server's answer (or why it was refused) and its source's link.
    ended = [seen for seen in shown.looks if seen.state != "in_progress"]
    assert [seen.state for seen in shown.looks if seen.state == "in_progress"] == \
        ["in_progress"] * len(ended) and shown.ends == 1
    by_tool = {(seen.tool, seen.number): seen for seen in ended}
    first = by_tool[("query_metrics", 1)]
    assert first.state == "complete" and first.title.startswith("Querying http_5xx_ratio")
    assert re.fullmatch(r"http_5xx_ratio 1\.00% → 20\.00% from \d\d:\d\d", str(first.gist))
    assert first.sources[0].url.startswith(f"{world['prometheus_url'].rstrip('/')}/graph?g0.")
    orders = by_tool[("query_metrics", 2)]
    assert orders.state == "error" and "payments-api" in str(orders.gist)
    assert by_tool[("list_alerts", 3)].gist == "1 firing: PaymentsErrors"
    assert str(by_tool[("recent_changes", 8)].gist).startswith("deploy")

    # Prometheus answered a summary with the change at the deploy; the same look again in the
    # run replayed the first answer from the ledger.
    [series] = said["range"]["series"]
    assert series["labels"]["service"] == "payments-api"
    assert (series["first"], series["last"]) == (0.01, 0.2)
    assert said["range-again"] == said["range"]
    # Another service's metric is refused before anything is sent.
    assert 'service="payments-api"' in said["orders"]["error"]
    # Alertmanager: payments-api's alert only, its injected summary as data.
    assert [a["alertname"] for a in said["alerts"]["alerts"]] == ["PaymentsErrors"]
    # Kubernetes: the component's pods; the injected log line is data in the answer.
    assert all(p["name"].startswith("payments-api-") for p in said["pods"]["pods"])
    assert INJECTED in said["injected"]["log"]
    assert INJECTED in json.dumps(said["events"]) and INJECTED in json.dumps(said["alerts"])
    # The busy pod's 500 lines do not fit 1,000 tokens: cut, the newest lines kept, and said.
    busy = said["busy"]
    assert busy["cut"] and "cut to stay within 1000 tokens" in busy["cut"][0]
    assert len(json.dumps(busy)) <= 1000 * 4 + 200
    # The three changes appear once each, newest first, with the rollout history beside them.
    changes = said["changes"]["changes"]
    assert [c["source"] for c in changes] == ["github", "argocd", "generic"], changes
    assert CHANGE_INJECTED[:60] in changes[0]["summary"]
    # Each says what it changed where its sender knew: the ref GitHub deployed, the revision
    # Argo CD synced, CI's deployment and its versions before and after.
    assert [(c.get("target"), c.get("before"), c.get("after")) for c in changes] == [
        (None, None, "v2.4.1"), (None, None, "3c1f0e2"),
        ("deployment/payments-api", "v2.3.8", "v2.3.9")]
    assert said["changes"]["rollout_history"]
    # The rollback is made for payments/payments-api, back to the revision before its deploy.
    made = said["rollback"]["plan"]
    assert made["title"].startswith("Roll payments-api back to revision 6")
    assert {s["params"]["namespace"] for s in made["steps"]} == {"payments"}
    assert {s["params"]["deployment"] for s in made["steps"]} == {"payments-api"}

    # Nothing was proposed, approved or run for the injected text; only reads reached
    # Kubernetes; what was cut is on the turn's usage note.
    case = app.cases.get_case(case_id)
    assert case["status"] == "PLANNING" and app.cases.proposed_plan(case_id) is None
    assert kube.writes() == []
    [usage] = events(app, case_id, "agent_usage")
    assert any("pod_logs" in cut for cut in usage["meta"]["context"]["cut"])
    # The card shows the last change before the case opened: GitHub's deploy, once.
    card = CardKeeper(app).state(case_id)
    assert card.last_change is not None and "payments-api v2.4.1" in card.last_change
    text = json.dumps(card_message(card)[1])
    assert text.count("*Last change*") == 1 and "v2.4.1" in text


def test_the_analyst_notes_the_component_s_last_change_and_its_firing_alerts(
        world: dict[str, Any]) -> None:
    engine: Engine = world.pop("engine")
    world.pop("kube")
    app = agent_app(engine, **world)
    now = datetime.now(UTC)
    post_changes(app, now)  # forty minutes ago and earlier: before the case opens
    case_id = case_at(app, CaseStatus.ANALYZING, "payments are failing")
    app.cases.name_components(case_id, ["payments-api"], "alertmanager", "named").data()

    runner = ConsumerRunner(app.engine, Analyst(app), sleep=lambda _s: None)
    assert runner.deliver(envelope_of(app.engine, case_id, Topic.ANALYSIS_RUN)) == "done"

    assert app.cases.get_case(case_id)["status"] == "PLANNING"
    [done] = events(app, case_id, "analysis_done")
    assert "last change before the case: " in done["reason"]
    assert "payments-api v2.4.1 by " in done["reason"]
    assert "1 alert(s) firing for payments-api: PaymentsErrors (critical)" in done["reason"]
    assert "orders-api" not in done["reason"]


def test_the_template_planner_makes_its_template_for_the_component_or_proposes_nothing(
        world: dict[str, Any]) -> None:
    engine: Engine = world.pop("engine")
    world.pop("kube")
    app = agent_app(engine, **world)
    runner = ConsumerRunner(app.engine, Planner(app), sleep=lambda _s: None)
    named = case_at(app, CaseStatus.PLANNING, "payments regression after the deploy")
    app.cases.name_components(named, ["payments-api"], "alertmanager", "named").data()
    unnamed = case_at(app, CaseStatus.PLANNING, "something regressed after a deploy")

    for case_id in (named, unnamed):
        assert runner.deliver(envelope_of(app.engine, case_id, Topic.PLAN_GENERATE)) == "done"

    stored = app.cases.proposed_plan(named)
    assert stored is not None
    assert stored["plan"]["title"].startswith("Roll payments-api back to revision 6")
    assert {s["params"]["deployment"] for s in stored["plan"]["steps"]} == {"payments-api"}
    assert app.cases.proposed_plan(unnamed) is None
    [note] = events(app, unnamed, "plan_not_proposed")
    assert note["reason"].startswith("no plan proposed from the template k8s.rollout.canary: "
                                     "this case names no catalog component")
