"""A server the tests need and cannot reach fails the run, locally as in CI: ``make services``
exits non-zero when it cannot start one, and a test on an unreachable PostgreSQL or Redis fails
(never a skip)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.peers import free_port

ROOT = Path(__file__).resolve().parents[3]
NEEDS_POSTGRES = ("tests/bot/test_bot_delivery.py::"
                  "test_four_deliveries_one_agent_run_one_plan_message")
NEEDS_REDIS = ("tests/integration/messaging/test_relay.py::"
               "test_redis_streams_bus_publishes_one_entry_per_message")


def run_make_services(**variables: str) -> subprocess.CompletedProcess[str]:
    args = [f"{name}={value}" for name, value in variables.items()]
    return subprocess.run(["make", "--no-print-directory", "services", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


def run_pytest(test_id: str, **env: str) -> subprocess.CompletedProcess[str]:
    """One test in a child pytest, outside CI, with the given environment."""
    child_env = {name: value for name, value in os.environ.items()
                 if name != "CI"
                 and not name.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         test_id],
        cwd=ROOT, env={**child_env, **env}, capture_output=True, text=True, timeout=120,
        check=False)


@pytest.mark.parametrize(("server", "variables"), [
    ("Redis", {"REDIS_PORT": "PORT", "REDIS_START": "false"}),
    ("PostgreSQL", {"PG_PORT": "PORT", "PG_START": "false"}),
])
def test_make_services_fails_when_a_server_cannot_start(server: str,
                                                        variables: dict[str, str]) -> None:
    port = str(free_port())
    ran = run_make_services(SERVICE_WAIT_S="1",
                            **{name: port if value == "PORT" else value
                               for name, value in variables.items()})
    assert ran.returncode != 0
    assert f"make services: {server} on 127.0.0.1:{port} is down and did not start" in ran.stderr


def test_make_services_passes_when_the_servers_answer() -> None:
    ran = run_make_services()
    assert ran.returncode == 0, ran.stderr


@pytest.mark.parametrize(("test_id", "variable", "url", "server"), [
    (NEEDS_POSTGRES, "OPSGATE_TEST_POSTGRES_URL",
     "postgresql+psycopg://postgres@127.0.0.1:{port}/test", "PostgreSQL"),
    (NEEDS_REDIS, "OPSGATE_TEST_REDIS_URL", "redis://127.0.0.1:{port}/0", "Redis"),
])
def test_an_unreachable_server_fails_the_test_outside_ci(test_id: str, variable: str, url: str,
                                                         server: str) -> None:
    unreachable = url.format(port=free_port())
    failed = run_pytest(test_id, **{variable: unreachable})
    assert failed.returncode == 1, failed.stdout
    assert "1 error" in failed.stdout or "1 failed" in failed.stdout, failed.stdout
    assert f"{server} is not reachable" in failed.stdout
    assert "skipped" not in failed.stdout
