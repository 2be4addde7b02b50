"""``/healthz`` answers while the process runs; ``/readyz`` checks the database, Redis (when
configured), the bus, the relay's lag and delivery to consumers, and says 503 with the failing
check named."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from core.api import create_api
from core.bootstrap import Extensions, bootstrap
from core.chat import RecordingSink
from core.consumers import subscriptions
from core.db.tables import outbox
from core.messaging import inbox
from core.messaging.delivery import subscribers
from core.ops.readiness import NO_SLACK
from core.settings import Settings
from core.settings.evidence import NO_EMBEDDINGS
from tests.support.kube_world import kube_world  # noqa: F401 (a fixture)
from tests.support.servers import REDIS_URL


def _client(engine: Engine | None = None, extensions: Extensions | None = None,
            **settings: object) -> Iterator[TestClient]:
    app = bootstrap(Settings(_env_file=None, **{"redis_url": None, **settings}), engine=engine,
                    extensions=extensions)
    try:
        with TestClient(create_api(app), base_url="http://localhost") as client:
            yield client
    finally:
        app.close()


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    yield from _client(engine)


def _ready(client: TestClient) -> tuple[int, dict[str, object]]:
    reply = client.get("/readyz")
    return reply.status_code, reply.json()["data"]


def test_healthz_is_the_process_alone(client, engine):
    reply = client.get("/healthz")
    assert reply.status_code == 200
    assert reply.json()["data"] == {"status": "ok", "database": engine.dialect.name}


def test_healthz_answers_even_when_the_database_does_not():
    gen = _client(database_url="postgresql+psycopg://postgres@127.0.0.1:1/test")
    client = next(gen)
    assert client.get("/healthz").status_code == 200
    status, report = _ready(client)
    assert status == 503
    assert report["status"] == "not_ready"
    checks = report["checks"]
    assert checks["database"]["ok"] is False and checks["relay_lag"]["ok"] is False
    gen.close()


NO_LOOKS = ("the agent's looks read nothing; missing: Prometheus (OPSGATE_PROMETHEUS_URL), "
            "Alertmanager (OPSGATE_ALERTMANAGER_URL), Kubernetes (OPSGATE_KUBECONFIG), recent "
            "changes (OPSGATE_CHANGES_TOKEN)")


def test_a_fresh_process_is_ready(client, engine):
    from core.library.vectors import NO_PGVECTOR

    by_meaning = {"ok": True, "embeddings": "wordllama-l2-256", "recall": "words and meaning"}
    library = by_meaning if engine.dialect.name == "sqlite" else {
        **by_meaning, "recall": "words", "warning": NO_PGVECTOR}  # the machine's own: no pgvector
    status, report = _ready(client)
    assert status == 200, report
    assert re.fullmatch(r"[0-9a-f]{12}", report["checks"]["policy"]["version"])
    assert report == {"status": "ready", "degraded": True, "checks": {
        "database": {"ok": True, "dialect": engine.dialect.name},
        "redis": {"ok": True, "configured": False},
        "bus": {"ok": True, "kind": "in-process"},
        "relay_lag": {"ok": True, "lag_s": 0.0, "bound_s": 60.0, "unpublished": 0},
        "delivery": {"ok": True, "undelivered": 0, "bound_s": 120.0},
        "metrics": {"ok": True, "configured": False, "source": NO_SOURCE,
                    "warning": NO_METRICS_WARNING},
        "investigation": {"ok": True, "sources": NO_LOOKS, "warning": NO_LOOKS},
        "approvers": {"ok": True, "configured": False, "warning": (
            "no approvers are configured (OPSGATE_APPROVERS): nobody approves, plans wait at "
            "the gate until someone is named")},
        "policy": {"ok": True, "policy": "default", "catalog": None, "components": 0,
                   "version": report["checks"]["policy"]["version"]},
        "directory": {"ok": True, "membership": (
            "nowhere (OPSGATE_DIRECTORY is unset): no group has members, only "
            "OPSGATE_APPROVERS may approve")},
        "library": library,
        "slack": {"ok": True, "configured": False, "warning": NO_SLACK}}}


def test_readiness_says_what_the_configuration_leaves_out_until_it_is_named(engine):
    slack = Extensions(chat=lambda app: RecordingSink())  # an outer layer's chat that posts
    gen = _client(engine, slack, approvers=["U0LEAD"])
    client = next(gen)
    status, report = _ready(client)
    assert status == 200
    assert report["checks"]["approvers"] == {"ok": True, "configured": True}
    assert report["checks"]["slack"] == {"ok": True, "configured": True}
    gen.close()



NO_SOURCE = ("none: plans with a metric check are refused; no metrics source is configured (set "
             "OPSGATE_PROMETHEUS_URL to your Prometheus, or OPSGATE_STATIC_METRICS to a stand-in "
             "table: JSON, metric name → number)")


NO_METRICS_WARNING = ("no metrics source is configured (set OPSGATE_PROMETHEUS_URL to your "
                      "Prometheus, or OPSGATE_STATIC_METRICS to a stand-in table: JSON, metric "
                      "name → number): plans with a metric check are refused")


def test_readyz_says_where_metric_checks_are_read(engine):
    for settings, configured, source in (
            ({}, False, NO_SOURCE),
            ({"static_metrics": {"error_rate": 0.001}}, True,
             "a stand-in table (OPSGATE_STATIC_METRICS): its readings are labelled stand-in and "
             "never make a verified fix"),
            ({"prometheus_url": "http://watcher:secret@127.0.0.1:9090"}, True,
             "Prometheus at http://127.0.0.1:9090")):
        gen = _client(engine, **settings)
        status, report = _ready(next(gen))
        gen.close()
        assert status == 200, report  # still ready: probes verify without a metrics source
        assert report["checks"]["metrics"] == {
            "ok": True, "configured": configured, "source": source,
            **({} if configured else {"warning": NO_METRICS_WARNING})}


# -- degraded: ready, with a capability the configuration leaves out -------------------------

SLACK = Extensions(chat=lambda app: RecordingSink())  # an outer layer's chat that posts
MISSING = {  # each capability, and the setting (or extension) that leaves it out
    "metrics": {"prometheus_url": None},
    "investigation": {"changes_token": None},
    "approvers": {"approvers": []},
    "slack": {"extensions": None},
    "library": {"embeddings_model": NO_EMBEDDINGS},
    "policy": {"policy": "a policy of its own", "catalog": None},
}
A_POLICY = ('@id("lead-approves")\npermit (principal == User::"U0LEAD", action, resource);\n')


@pytest.fixture
def everything(sqlite_engine: Engine, kube_world) -> dict[str, object]:  # noqa: F811
    """Settings and extensions that leave nothing out (SQLite: the librarian recalls by
    meaning there; no dependency the checks contact is down)."""
    return {"engine": sqlite_engine, "extensions": SLACK, "approvers": ["U0LEAD"],
            "prometheus_url": "http://127.0.0.1:9", "alertmanager_url": "http://127.0.0.1:9",
            "kubeconfig": str(kube_world().config), "changes_token": "intake"}


def test_a_process_with_every_capability_is_ready_and_not_degraded(everything):
    gen = _client(**everything)  # type: ignore[arg-type]
    status, report = _ready(next(gen))
    gen.close()
    assert status == 200, report
    assert report["degraded"] is False, report
    assert [name for name, check in report["checks"].items() if "warning" in check] == []


@pytest.mark.parametrize("capability", sorted(MISSING))
def test_each_missing_capability_is_a_warning_and_the_process_degraded(everything, capability,
                                                                      tmp_path):
    (tmp_path / "own.cedar").write_text(A_POLICY)  # policies without a catalog: no owners
    left_out = {name: tmp_path / "own.cedar" if name == "policy" else value
                for name, value in MISSING[capability].items()}
    gen = _client(**{**everything, **left_out})  # type: ignore[arg-type]
    status, report = _ready(next(gen))
    gen.close()
    assert status == 200, report  # still serves: degraded is not unready
    assert report["status"] == "ready" and report["degraded"] is True
    assert report["checks"][capability]["warning"], report["checks"][capability]


def test_a_relay_that_lags_past_its_bound_makes_the_process_not_ready(client, engine):
    with engine.begin() as conn:
        conn.execute(insert(outbox).values(
            topic="evt.case.opened.v1", key="k", payload={},
            created_at=datetime.now(UTC) - timedelta(seconds=120)))
    status, report = _ready(client)
    assert status == 503
    lag = report["checks"]["relay_lag"]
    assert lag["ok"] is False and lag["unpublished"] == 1 and 119 < lag["lag_s"] < 600


def test_a_message_its_consumers_never_recorded_makes_the_process_not_ready(client, engine):
    """Accepted by the bus is not delivered: a published row whose consumers' inbox rows are
    missing past OPSGATE_DELIVERY_BOUND_S is reported, naming who has not recorded it."""
    topic = "evt.case.opened.v1"
    waiting_for = sorted(subscribers(subscriptions())[topic])
    with engine.begin() as conn:
        message_id = conn.execute(insert(outbox).values(
            topic=topic, key="k", payload={},
            created_at=datetime.now(UTC) - timedelta(seconds=200),
            published_at=datetime.now(UTC) - timedelta(seconds=200)).returning(outbox.c.id)
        ).scalar_one()
    status, report = _ready(client)
    assert status == 503
    assert report["checks"]["delivery"]["ok"] is False
    assert report["checks"]["delivery"]["undelivered"] == 1
    assert report["checks"]["delivery"]["waiting_for"] == waiting_for
    assert 199 < report["checks"]["delivery"]["oldest_s"] < 600
    with engine.begin() as conn:
        for consumer in waiting_for:
            inbox.mark(conn, consumer, message_id)
    status, report = _ready(client)
    assert status == 200, report


def test_an_unreachable_redis_makes_the_process_not_ready(sqlite_engine):
    gen = _client(sqlite_engine, redis_url="redis://127.0.0.1:1/0")
    client = next(gen)
    status, report = _ready(client)
    assert status == 503
    assert report["checks"]["redis"]["ok"] is False
    assert report["checks"]["bus"] == {"ok": False, "kind": "redis-streams"}
    assert report["checks"]["database"]["ok"] is True
    gen.close()


def test_a_reachable_redis_is_ready(sqlite_engine, redis_client):
    gen = _client(sqlite_engine, redis_url=REDIS_URL)
    client = next(gen)
    status, report = _ready(client)
    assert status == 200, report
    assert report["checks"]["redis"] == {"ok": True, "configured": True}
    gen.close()


def test_every_reply_names_its_correlation_id(client):
    given = client.get("/healthz", headers={"X-Correlation-Id": "trace-me-1"})
    assert given.headers["X-Correlation-Id"] == "trace-me-1"
    fresh = client.get("/healthz")
    assert len(fresh.headers["X-Correlation-Id"]) == 32


def test_readyz_says_how_the_librarian_recalls(sqlite_engine, pg_engine, pgvector_engine):
    from core.library.vectors import NO_PGVECTOR

    cases = ((sqlite_engine, {}, "words and meaning", None),
             (pgvector_engine, {}, "words and meaning", None),
             (pg_engine, {}, "words", NO_PGVECTOR),
             (sqlite_engine, {"embeddings_model": "none"}, "words",
              "OPSGATE_EMBEDDINGS_MODEL is none: the librarian recalls by words only "
              "(full-text search)"))
    for engine, settings, recall, warning in cases:
        gen = _client(engine, **settings)
        status, report = _ready(next(gen))
        gen.close()
        assert status == 200, report  # full-text search still serves: ready either way
        library = report["checks"]["library"]
        assert library["recall"] == recall
        assert library.get("warning") == warning
