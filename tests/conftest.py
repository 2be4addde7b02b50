"""Where a test is: ``tests/<tier>/<package>/test_<what>.py``. The tier says what the test
needs: ``unit`` (pure, no server; ``make unit``), ``integration`` (the real PostgreSQL, SQLite,
Redis and NATS, in the test's process), ``e2e`` (``opsgate`` run as processes), ``chaos`` (faults
through a proxy), ``ops`` (what an operator sees: alerts, metrics, export, reconcile, trace), and
the tiers named for one layer or package: ``bot``, ``agent``, ``mcp``, ``sandbox``. The package is
the one the test exercises most, named as in the code: the first package below a layer
(``core/cases/`` → ``cases``, ``core/steps/adapters/`` → ``steps``, ``bot/sandbox/`` →
``sandbox``, ``agent/eval/`` → ``eval``), a module directly in a layer → the layer
(``core/loop.py``, ``core/migrate.py`` → ``core``), ``tests/support/`` itself → ``support``. In
a tier named for a layer the tier is the package: its files sit flat and a sub-package has a
folder (``tests/agent/eval/``). So the gate on real databases is tested in
``tests/integration/cases/``, the FSM in ``tests/unit/domain/``, the JetStream bus in
``tests/integration/messaging/``. A test module never imports another: what tests share is in
``tests/support/``, their data in ``tests/fixtures/`` and ``tests/scenarios/``.

Shared fixtures: a migrated database per test, on SQLite (a temp file) and on the real local
PostgreSQL (a schema of its own, dropped afterwards), the test's app and its REST client, the
real monitoring peers of ``tests/support/peers.py``, and a PostgreSQL with pgvector of the run's
own (``tests/support/pgvector.py``). An unreachable PostgreSQL or Redis, or a missing Prometheus,
Alertmanager or pgvector PostgreSQL, fails the run (``tests/support/servers.missing``)."""

from __future__ import annotations

import os
import random
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from sqlalchemy import Engine, create_engine, text

from core.api import create_api
from core.bootstrap import App
from core.cases.service import CaseService
from core.db.database import make_engine
from core.migrate import upgrade_engine
from core.settings import TEST_PREFIX
from tests.support.apps import make_app
from tests.support.cases import case_service
from tests.support.peers import alertmanager_server, metric_service, prometheus_server  # noqa: F401
from tests.support.pg_schemas import SchemaTemplate
from tests.support.pgvector import pgvector_engine, pgvector_server  # noqa: F401
from tests.support.servers import POSTGRES_URL, REDIS_URL, missing

# Hypothesis's per-example deadline is a timed assertion: on two loaded cores a slow example
# failed a run for no reason in the code, and so can the "too slow to generate" health check.
# Examples are bounded by their count instead.
settings.register_profile("opsgate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("opsgate")

# The developer's own configuration never reaches a test: an OPENAI_API_KEY turns the offline
# planner model into ChatOpenAI, an OPSGATE_APPROVERS changes who may approve. Kept: the
# suite's own OPSGATE_TEST_* knobs (where PostgreSQL, Redis and the peers' binaries are, the
# shuffle seed), which opsgate never reads (Settings ignores names it does not declare) and the
# child pytest runs of tests/e2e/support/test_missing_servers.py and the MCP conformance test
# inherit.
CLEARED = ("OPSGATE_", "OPENAI_", "SLACK_")
SUITE_KNOBS = TEST_PREFIX  # the suite's own variables, which no opsgate process refuses

# Under pytest-xdist (`make test`: two workers) the tests of one lane run on one worker, in turn:
# "heavy" ones start many processes, threads or PostgreSQL connections at once (two together
# starve two cores' leases and deadlines, or come near PostgreSQL's 100 connections); the
# browser stories share one module's server. Every other test is handed out singly.
LANES = {
    "heavy": ("tests/e2e/core/test_loop_processes.py", "tests/e2e/core/test_signal_story.py",
              "tests/chaos/gateway/test_gateway_chaos.py", "tests/chaos/core/test_loop_faults.py",
              "tests/integration/cases/test_concurrency.py",
              "tests/integration/gateway/test_gateway_semantics.py",
              # 1 s AckWaits: on a machine starved by a kill -9 storm a fetch times out, or an
              # acknowledged message comes once more (same stream copy, same delivery count).
              "tests/integration/messaging/test_jetstream.py",
              "tests/mcp/test_mcp_server.py::test_twenty_concurrent_identical_calls_open_one_case"),
    "sandbox_browser": ("tests/e2e/sandbox/test_sandbox_browser.py",),
    # One build of the image's environment (its module fixture) rather than one per worker.
    "image_build": ("tests/e2e/deploy/test_build_script.py",),
}


def _lanes_name_real_files() -> None:
    """A lane naming a moved or renamed file would silently stop grouping its tests: fail the
    run at once instead, naming the path."""
    here = Path(__file__).resolve().parent.parent
    for lane, places in LANES.items():
        for place in places:
            found = (here / place.split("::")[0]).is_file()
            assert found, f"lane {lane} names {place}: no such file"


_lanes_name_real_files()


def lane_of(nodeid: str) -> str | None:
    return next((lane for lane, places in LANES.items() if nodeid.startswith(places)), None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's loadgroup, with the lanes above as its groups. (xdist 3.8 names a marked test's
    group by rewriting ``item._nodeid``, which pytest 9.2 no longer reads, so marks would do
    nothing: the lanes are told to the scheduler by test id instead.)"""
    from xdist.scheduler import LoadGroupScheduling

    class LaneScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane_of(nodeid) or super()._split_scope(nodeid)

    return LaneScheduling(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-seed", type=int, default=None, metavar="SEED",
                     help="replay a chaos run's fault schedule: the seed it printed")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``OPSGATE_TEST_SHUFFLE=SEED`` runs the modules, and the tests in each, in an order drawn
    from SEED (the same on every xdist worker), to find tests that pass only after another."""
    seed = os.environ.get("OPSGATE_TEST_SHUFFLE")
    if not seed:
        return
    draw = random.Random(seed)
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = list(modules.values())
    draw.shuffle(order)
    for tests in order:
        draw.shuffle(tests)
    items[:] = [item for tests in order for item in tests]


@pytest.fixture(autouse=True)
def _no_developer_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without OPSGATE_*, OPENAI_* and SLACK_* in its environment (see
    ``CLEARED``); a test that means one sets it with ``monkeypatch.setenv``."""
    for name in [name for name in os.environ
                 if name.startswith(CLEARED) and not name.startswith(SUITE_KNOBS)]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[Engine]:
    engine = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:  # any failure to reach the server
        missing(f"PostgreSQL is not reachable: {exc}")
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def _pg_template(postgres_admin: Engine) -> Iterator[SchemaTemplate]:
    """The migrations, run once per test process into a template each test's schema copies."""
    template = SchemaTemplate(POSTGRES_URL, prefix="t")
    yield template
    template.close()


@pytest.fixture
def pg_engine(_pg_template: SchemaTemplate) -> Iterator[Engine]:
    """A fresh schema at head on the local PostgreSQL, the test's own, dropped after the test
    (a copy of the migrated template: ``tests/support/pg_schemas.py``)."""
    with _pg_template.schema(pool_size=20) as engine:
        yield engine


@pytest.fixture(scope="session")
def _sqlite_at_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated to head for the whole run (a migration run costs ~0.2 s)."""
    path = tmp_path_factory.mktemp("sqlite-at-head") / "opsgate.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade_engine(engine)
    engine.dispose()  # the last connection checkpoints the WAL into the file
    return path


@pytest.fixture
def sqlite_engine(tmp_path, _sqlite_at_head: Path) -> Iterator[Engine]:
    """A SQLite file of the test's own, a copy of the migrated one."""
    path = tmp_path / "opsgate.db"
    shutil.copyfile(_sqlite_at_head, path)
    engine = make_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each test that takes ``engine`` runs on both databases."""
    fixture = "sqlite_engine" if request.param == "sqlite" else "pg_engine"
    return request.getfixturevalue(fixture)


@pytest.fixture
def service(engine: Engine) -> CaseService:
    return case_service(engine)


@pytest.fixture
def app_options() -> dict[str, Any]:
    """What the test's ``app`` is built with beyond ``make_app``'s defaults: settings, ``chat``,
    ``extensions``. A module overrides this fixture to vary them (it may take other fixtures)."""
    return {}


@pytest.fixture
def app(engine: Engine, app_options: dict[str, Any]) -> Iterator[App]:
    """The composition root on the test's database (both, through ``engine``; ``ON_POSTGRES``
    pins a test to PostgreSQL), built by ``tests.support.apps.make_app``, closed afterwards."""
    made = make_app(engine, **app_options)
    yield made
    made.close()


@pytest.fixture
def client(app: App) -> Iterator[TestClient]:
    """The REST API of the test's ``app``, called in process."""
    with TestClient(create_api(app), base_url="http://localhost") as test_client:
        yield test_client


@pytest.fixture(scope="session")
def _redis_server() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except Exception as exc:  # any failure to reach the server
        missing(f"Redis is not reachable: {exc}")
    yield client
    client.close()


@pytest.fixture
def redis_client(_redis_server: redis.Redis) -> redis.Redis:
    """The local Redis (127.0.0.1:6379); fails under CI=true when unreachable. Keys go under
    ``redis_prefix``."""
    return _redis_server


@pytest.fixture
def redis_prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    keys = list(redis_client.scan_iter(match=f"{prefix}*", count=500))
    if keys:
        redis_client.delete(*keys)
