"""The signal-driven story with the real peers, opsgate running as processes: a scraped service's
p95 goes bad → Prometheus' rule fires → Alertmanager's webhook opens a case → the analyst reads
the real ``query_range`` → a scripted model (a local OpenAI-compatible stub) proposes a plan whose
fix is an ``http.request`` and whose ``verify`` needs the p95 below 1 s for a window after the
change → an approver's signed Slack click → exactly one fix request → verification waits for the
window → CLOSED; Alertmanager's resolution lands on the case; Prometheus scrapes opsgate itself.
The case names no catalog component: the operator's default scope (the scraped job's label) is
the series its verify check must select, and the pass records that it read them.

On SQLite (``opsgate serve`` with its in-process loop, killed with SIGKILL while verification
waits and started again) and on PostgreSQL + Redis Streams (``serve``, ``relay`` and ``consume``
processes; the consumer process is the one killed), and the same on NATS JetStream (a
``nats-server -js`` of the test's own). And the fix that does not fix: PARKED at the verify
block's deadline with the last reading. Bounded: deadlines of a minute or two, 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from sqlalchemy import Engine, select

from bot.ids import Action
from core.cases.timeline import entry_of
from core.db.case_store import as_utc
from core.db.database import make_engine
from core.db.tables import case_timeline, ops_case
from core.migrate import upgrade_engine
from tests.support.local_http import Reply, Seen, local_server
from tests.support.nats_server import NatsServer
from tests.support.openai_stub import PATH as CHAT_PATH
from tests.support.openai_stub import StubTurn, completion, tool_call
from tests.support.peers import (
    BAD_P95_S,
    GAUGE,
    HEALTHY_P95_S,
    Alertmanager,
    MetricService,
    Prometheus,
    ScrapeJob,
    alert_rule,
    free_port,
    poll,
)
from tests.support.processes import Process, clean_env
from tests.support.servers import REDIS_URL
from tests.support.slack import (
    APPROVER,
    APPROVERS,
    CHANNEL,
    FORM,
    SECRET,
    FakeSlack,
    action_body,
    approval_of,
    fake_slack,
    mention_event,
    signed,
)

# Group "heavy": make test's two workers never run two of its files at once (Makefile).
pytestmark = [pytest.mark.loop]

ALERT_TOKEN = "story-alert-token"
RULE = alert_rule("CheckoutSlow", f"{GAUGE} > 1", summary="checkout p95 over 1 s")
WINDOW_S = 6  # the verify block's for_s: long enough to kill the process inside it
STORY_S = 90.0  # each stage's bound
JOB = "checkout"  # the scrape job of the service: its series carry job="checkout"
SERIES = f'{GAUGE}{{job="{JOB}"}}'  # the service's p95, as a verify check must select it


def fix_plan(service: MetricService, *, deadline_s: int) -> dict[str, Any]:
    return {
        "title": "Roll checkout back to the last good release",
        "risk_score": 0.3,
        "steps": [{"action": "http.request",
                   "params": {"method": "POST", "url": f"{service.base_url}/fix",
                              "json": {"release": "last-good"}},
                   "timeout_s": 30, "retry": 1}],
        "rollback": {"action": "noop", "params": {}},
        "verify": {"metric": f"max({SERIES})", "below": 1, "for_s": WINDOW_S,
                   "timeout_s": deadline_s},
    }


class ScriptedPlanner:
    """The model: asked to plan a case, it proposes ``plan`` for the case its prompt names;
    shown the tool's result, it answers in one line."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, seen: Seen) -> Reply:
        request = json.loads(seen.body)
        with self._lock:
            self.requests.append(request)
            n = len(self.requests)
        messages = request["messages"]
        if messages and messages[-1].get("role") == "tool":
            turn = StubTurn(content="Proposed a rollback; it waits for an approver.")
        else:
            case_id = _case_named(messages)
            turn = StubTurn(tool_calls=(tool_call(f"call_{n}", "propose_plan",
                                                  case_id=case_id, plan=self.plan),))
        return Reply(200, json.dumps(completion(turn, n)).encode(),
                     {"Content-Type": "application/json"})


def _case_named(messages: list[dict[str, Any]]) -> str:
    text = " ".join(str(m.get("content") or "") for m in messages)
    found = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text)
    assert found, f"no case id in the agent's prompt: {text[:500]}"
    return found.group(0)


@dataclass
class Story:
    """opsgate's processes, the peers and the fakes of one story."""

    engine: Engine
    service: MetricService
    prometheus: Prometheus
    alertmanager: Alertmanager
    slack: FakeSlack
    planner: ScriptedPlanner
    api: str
    serve: Process
    loop_processes: list[Process]

    def cases(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(ops_case).order_by(ops_case.c.created_at))
                    .mappings()]

    def status(self, case_id: UUID) -> str:
        return str(next(c for c in self.cases() if c["id"] == case_id)["status"])

    def timeline(self, case_id: UUID) -> list[dict[str, Any]]:
        query = (select(case_timeline).where(case_timeline.c.case_id == case_id)
                 .order_by(case_timeline.c.id))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def events(self, case_id: UUID, event: str) -> list[dict[str, Any]]:
        return [row for row in self.timeline(case_id) if row["event"] == event]

    def wait_status(self, case_id: UUID, wanted: str, timeout_s: float = STORY_S) -> None:
        def reached() -> bool | None:
            status = self.status(case_id)
            assert status not in _FINAL - {wanted}, self._diagnosis(case_id, status)
            return status == wanted or None
        poll(reached, timeout_s, f"case {case_id} {wanted}")

    def click_approve(self) -> httpx.Response:
        plan_post = poll(lambda: next(iter(_plan_messages(self.slack)), None), STORY_S,
                         "the plan message with its buttons")
        body = action_body(Action.APPROVE, approval_of(plan_post) or "", user=APPROVER,
                           message_ts=plan_post["ts"], thread_ts=plan_post.get("thread_ts"))
        return httpx.post(f"{self.api}/slack/events", content=body,
                          headers=signed(body, content_type=FORM), timeout=10)

    def _diagnosis(self, case_id: UUID, status: str) -> str:
        rows = [(r["event"], r["actor"], r["reason"]) for r in self.timeline(case_id)]
        return f"case is {status}:\n" + "\n".join(map(str, rows)) + "\n" + \
            self.serve.output()[-3000:]


_FINAL = {"CLOSED", "PARKED"}


def _plan_messages(slack: FakeSlack) -> list[dict[str, Any]]:
    return [p for p in slack.posts() if approval_of(p)]


@contextmanager
def story(tmp_path: Path, *, database_url: str, engine: Engine, fix_works: bool,
          deadline_s: int, redis_prefix: str | None,
          prometheus_server: Callable[..., Prometheus],
          alertmanager_server: Callable[..., Alertmanager],
          bus_url: str | None = None) -> Iterator[Story]:
    """Everything of one story started, healthy, before anything goes bad. ``bus_url``: the
    processes' bus is JetStream there (Redis, when given too, keeps the gateway's claims)."""
    with ExitStack() as stack:
        service = stack.enter_context(MetricService(fix_works=fix_works))
        slack = stack.enter_context(fake_slack())
        planner = ScriptedPlanner(fix_plan(service, deadline_s=deadline_s))
        model = stack.enter_context(local_server({CHAT_PATH: planner}))
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        alertmanager = alertmanager_server(f"{api}/alerts/alertmanager", ALERT_TOKEN)
        jobs = [ScrapeJob(JOB, [service.target]),
                ScrapeJob("opsgate", [f"127.0.0.1:{port}"])]
        prometheus = prometheus_server(jobs, rules=[RULE], alertmanager=alertmanager)
        env = clean_env(**_knobs(database_url, service, prometheus, slack, model.url("/v1"),
                                 redis_prefix, bus_url))
        serve = Process("serve", ("serve", "--port", str(port)), env, tmp_path / "serve.log")
        loop = [Process(name, args, env, tmp_path / f"{name}.log")
                for name, args in _loop_processes(redis_prefix, bus_url)]
        for process in (serve, *loop):
            stack.callback(process.close)
            process.start()
        poll(lambda: _healthy(api), 60, "opsgate serve answers /healthz")
        prometheus.wait_for('up{job="opsgate"}', lambda values: values == [1.0], timeout_s=30)
        prometheus.wait_for(GAUGE, lambda values: values == [HEALTHY_P95_S], timeout_s=30)
        yield Story(engine, service, prometheus, alertmanager, slack, planner, api, serve, loop)


def _knobs(database_url: str, service: MetricService, prometheus: Prometheus, slack: FakeSlack,
           model_url: str, redis_prefix: str | None,
           bus_url: str | None = None) -> dict[str, str]:
    knobs = {
        "OPSGATE_DATABASE_URL": database_url,
        "OPSGATE_PROMETHEUS_URL": prometheus.base_url,
        "OPSGATE_ALERT_TOKEN": ALERT_TOKEN,
        "OPSGATE_HTTP_ALLOWLIST": json.dumps([service.base_url + "/"]),
        "OPSGATE_METRIC_CATALOG": json.dumps({"latency_p95_ms": {
            "query": f"max({GAUGE}) * 1000", "kind": "level"}}),
        "OPSGATE_ANALYSIS_BEFORE_S": "300", "OPSGATE_ANALYSIS_AFTER_S": "60",
        "OPSGATE_ANALYSIS_STEP_S": "1",
        "OPSGATE_VERIFY_POLL_S": "1",
        # The case an alert opens names no catalog component (there is no catalog): the series
        # its checks may read are the operator's default scope, the scraped service's job.
        "OPSGATE_DEFAULT_METRIC_LABELS": f"job={JOB}",
        "OPSGATE_APPROVERS": json.dumps(APPROVERS),
        "OPSGATE_MODEL": "stub-model", "OPENAI_API_KEY": "sk-test-not-real",
        "OPENAI_BASE_URL": model_url,
        "SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_SIGNING_SECRET": SECRET,
        "OPSGATE_SLACK_API_URL": slack.api_url, "OPSGATE_INCIDENT_CHANNEL": CHANNEL,
        "OPSGATE_LOOP_POLL_S": "0.1", "OPSGATE_RELAY_POLL_S": "0.5",
        "OPSGATE_STREAM_CLAIM_IDLE_S": "3",
    }
    if redis_prefix is not None:
        knobs.update({"OPSGATE_REDIS_URL": REDIS_URL,
                      "OPSGATE_STREAM_PREFIX": f"{redis_prefix}stream:",
                      "OPSGATE_GATEWAY_KEY_PREFIX": f"{redis_prefix}gw:"})
    if bus_url is not None:
        # A short AckWait: the killed consumer's messages come back within seconds.
        knobs.update({"OPSGATE_BUS_URL": bus_url, "OPSGATE_JETSTREAM_ACK_WAIT_S": "3"})
    return knobs


def _loop_processes(redis_prefix: str | None,
                    bus_url: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    if redis_prefix is None and bus_url is None:
        return []  # serve runs the loop in-process
    return [("relay", ("relay",)), ("consume", ("consume", "--workers", "2"))]


def _healthy(api: str) -> bool | None:
    try:
        return httpx.get(f"{api}/healthz", timeout=2).status_code == 200 or None
    except httpx.HTTPError:
        return None


def _sqlite_url(tmp_path: Path) -> tuple[str, Engine]:
    url = f"sqlite:///{tmp_path / 'opsgate.db'}"
    engine = make_engine(url)
    upgrade_engine(engine)
    return url, engine


# -- the stories -----------------------------------------------------------------------------


def run_to_the_fix(world: Story) -> UUID:
    """From the bad p95 to the approved fix: the case, analysed from real data, at the gate."""
    assert world.cases() == []
    world.service.set(GAUGE, BAD_P95_S)
    [case] = poll(lambda: world.cases() or None, STORY_S, "the alert opens a case")
    case_id = case["id"]
    assert case["title"] == "CheckoutSlow: checkout p95 over 1 s"
    world.wait_status(case_id, "WAIT_GATE")
    [findings] = world.events(case_id, "analysis_findings")
    assert "latency_p95_ms" in json.dumps(findings["meta"])  # read from the real query_range
    assert world.service.fix_requests == []  # nothing runs before a person approves
    clicked = world.click_approve()
    assert clicked.status_code == 200
    return case_id


def assert_one_fix(world: Story) -> None:
    [key] = world.service.fix_requests
    assert key, "the fix request carries an Idempotency-Key"


def kill_while_verification_waits(world: Story, case_id: UUID, process: Process) -> None:
    poll(lambda: world.events(case_id, "verify_reading") or None, STORY_S,
         "verification says it waits")
    assert world.status(case_id) == "VERIFYING"
    process.kill9()
    process.start()


def assert_judged_after_the_window(world: Story, case_id: UUID) -> None:
    """The pass came only once the p95 had held below 1 s for the window after the change."""
    [changed] = world.events(case_id, "exec_done")
    [passed] = world.events(case_id, "verify_pass")
    waited = as_utc(passed["created_at"]) - as_utc(changed["created_at"])
    assert waited.total_seconds() >= WINDOW_S, waited
    # The pass was read from the service's own series: a plan the librarian may lend.
    [result] = world.events(case_id, "verify_result")
    assert entry_of(result).context.get("series_read") is True, result["meta"]


def assert_resolution_noted(world: Story, case_id: UUID) -> None:
    poll(lambda: world.events(case_id, "alert_resolved") or None, STORY_S,
         "Alertmanager's resolution lands on the case")


def test_the_story_on_sqlite_closes_after_a_kill_while_verifying(
        tmp_path: Path, prometheus_server, alertmanager_server) -> None:
    url, engine = _sqlite_url(tmp_path)
    with story(tmp_path, database_url=url, engine=engine, fix_works=True, deadline_s=60,
               redis_prefix=None, prometheus_server=prometheus_server,
               alertmanager_server=alertmanager_server) as world:
        case_id = run_to_the_fix(world)
        kill_while_verification_waits(world, case_id, world.serve)
        world.wait_status(case_id, "CLOSED")
        assert_one_fix(world)
        waited = world.events(case_id, "verify_reading")
        assert waited and f"{WINDOW_S}s" in str(waited[0]["reason"]), waited[0]["reason"]
        assert_judged_after_the_window(world, case_id)
        assert_resolution_noted(world, case_id)
        assert world.prometheus.values('up{job="opsgate"}') == [1.0]
    engine.dispose()


@pytest.mark.parametrize("bus", ["redis", pytest.param("jetstream", marks=pytest.mark.nats)])
def test_the_story_on_postgres_and_each_bus_closes_after_a_consumer_kill(
        tmp_path: Path, pg_engine: Engine, redis_client, redis_prefix: str,
        prometheus_server, alertmanager_server, bus: str) -> None:
    """On Redis Streams, and on JetStream (Redis keeping the gateway's claims alone)."""
    url = pg_engine.url.render_as_string(hide_password=False)
    with ExitStack() as stack:
        bus_url = None
        if bus == "jetstream":
            (tmp_path / "nats").mkdir()
            bus_url = stack.enter_context(NatsServer(tmp_path / "nats")).url
        world = stack.enter_context(story(
            tmp_path, database_url=url, engine=pg_engine, fix_works=True, deadline_s=60,
            redis_prefix=redis_prefix, prometheus_server=prometheus_server,
            alertmanager_server=alertmanager_server, bus_url=bus_url))
        case_id = run_to_the_fix(world)
        consume = next(p for p in world.loop_processes if p.name == "consume")
        kill_while_verification_waits(world, case_id, consume)
        world.wait_status(case_id, "CLOSED")
        assert_one_fix(world)
        assert_judged_after_the_window(world, case_id)
        assert_resolution_noted(world, case_id)
        assert world.prometheus.values('up{job="opsgate"}') == [1.0]


def test_a_fix_that_does_not_fix_parks_at_the_deadline_with_the_reading(
        tmp_path: Path, prometheus_server, alertmanager_server) -> None:
    url, engine = _sqlite_url(tmp_path)
    with story(tmp_path, database_url=url, engine=engine, fix_works=False, deadline_s=15,
               redis_prefix=None, prometheus_server=prometheus_server,
               alertmanager_server=alertmanager_server) as world:
        case_id = run_to_the_fix(world)
        world.wait_status(case_id, "PARKED")
        assert_one_fix(world)
        [failed] = world.events(case_id, "verify_failed")
        assert f"{BAD_P95_S:g}" in str(failed["reason"]), failed["reason"]
        readings = world.events(case_id, "verify_reading")
        assert len(readings) >= 2, "it kept reading until the deadline"
        assert world.status(case_id) == "PARKED"
    engine.dispose()


@pytest.mark.nats
def test_a_mention_in_slack_closes_its_case_on_jetstream(
        tmp_path: Path, pg_engine: Engine, redis_client, redis_prefix: str,
        prometheus_server, alertmanager_server) -> None:
    """The story begun in Slack instead of by an alert, on the production shape with JetStream
    as the bus: a signed mention opens the case in its thread, the plan message comes to the
    thread, an approver's click runs the fix once, the case CLOSES and the thread says so."""
    url = pg_engine.url.render_as_string(hide_password=False)
    (tmp_path / "nats").mkdir()
    with NatsServer(tmp_path / "nats") as nats, story(
            tmp_path, database_url=url, engine=pg_engine, fix_works=True, deadline_s=60,
            redis_prefix=redis_prefix, prometheus_server=prometheus_server,
            alertmanager_server=alertmanager_server, bus_url=nats.url) as world:
        body = mention_event("<@U0BOT> checkout p95 is over a second", event_id="EvJS1",
                             ts="1700000000.000100")
        said = httpx.post(f"{world.api}/slack/events", content=body, headers=signed(body),
                          timeout=10)
        assert said.status_code == 200, said.text
        [case] = poll(lambda: world.cases() or None, STORY_S, "the mention opens a case")
        world.wait_status(case["id"], "WAIT_GATE")
        assert world.click_approve().status_code == 200  # once the plan message is there
        [plan_post] = _plan_messages(world.slack)
        assert plan_post.get("thread_ts") == "1700000000.000100"  # in the mention's thread
        world.wait_status(case["id"], "CLOSED")
        assert_one_fix(world)
        assert_judged_after_the_window(world, case["id"])
        poll(lambda: any("CLOSED" in text or "closed" in text for text in world.slack.texts())
             or None, STORY_S, "the thread tells how it ended")
