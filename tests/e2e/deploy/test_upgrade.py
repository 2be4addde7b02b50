"""An upgrade from an older release, as docs/deploy.md's "Upgrades" does it: a database written
by opsgate at 9cfb676 (schema 0014; ``tests/fixtures/upgrade/``) is restored into a fresh
PostgreSQL database, the section's ``opsgate migrate`` brings it to head, every case, timeline,
ledger, outbox and inbox row is as the old release left it, and the new release's ``serve``,
``relay`` and ``consume`` (on Redis Streams) move the case the old release left NEW on to CLOSED.

Bounded: a 150 KB dump, one migration run, one case through the loop (a noop plan the gatekeeper
approves itself, verified on a 100x clock), a deadline of a minute."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.support.deploy_doc import contents, fresh_database, run_blocks
from tests.support.metrics import STAND_IN_ENV
from tests.support.peers import free_port
from tests.support.processes import Process, clean_env
from tests.support.servers import REDIS_URL

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.loop]

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "upgrade" / "9cfb676.sql"
DOC_URL = "postgresql://opsgate@postgres.example.com:5432/opsgate"
DEADLINE_S = 60.0


def wait_until(done, what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def status(api: str, case_id: str) -> str | None:
    try:
        return str(httpx.get(f"{api}/case/{case_id}", timeout=5).json()["data"]["status"])
    except (httpx.TransportError, KeyError, ValueError):
        return None


def test_an_older_releases_database_upgrades_intact_and_its_waiting_case_moves_on(
        tmp_path, postgres_admin, redis_prefix):
    with fresh_database(postgres_admin, "upgrade") as database:
        subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(FIXTURE),
                        database.url], check=True, capture_output=True, timeout=120)
        before = contents(database)
        statuses = {str(case["id"]): case["status"] for case in before["ops_case"]}
        assert sorted(statuses.values()) == ["CLOSED", "NEW"]
        assert before["case_timeline"] and before["tool_call_ledger"]

        said = run_blocks("Upgrades", tmp_path, replaced=[(DOC_URL, database.url)])
        assert "upgraded from 0014 to head" in said, said
        assert contents(database, columns=before) == before

        (tmp_path / "no-runbooks").mkdir()
        port = free_port()
        env = clean_env(OPSGATE_DATABASE_URL=database.url, OPSGATE_REDIS_URL=REDIS_URL,
                        OPSGATE_STREAM_PREFIX=redis_prefix,
                        OPSGATE_GATEWAY_KEY_PREFIX=f"{redis_prefix}gw:",
                        OPSGATE_AUTO_APPROVE="noop_only",
                        OPSGATE_RUNBOOKS_DIR=str(tmp_path / "no-runbooks"),
                        OPSGATE_VERIFY_TIME_SCALE="0.01", OPSGATE_VERIFY_POLL_S="0.5",
                        OPSGATE_HEARTBEAT_DIR=str(tmp_path), **STAND_IN_ENV)
        processes = [Process(name, args, env, tmp_path / f"{name}.log") for name, args in (
            ("serve", ("serve", "--port", str(port))), ("relay", ("relay",)),
            ("consume", ("consume",)))]
        waiting = next(case for case, was in statuses.items() if was == "NEW")
        api = f"http://127.0.0.1:{port}"
        try:
            for process in processes:
                process.start()
            wait_until(lambda: status(api, waiting) == "CLOSED",
                       "the old release's waiting case to close")
            assert all(process.alive for process in processes)
        finally:
            for process in processes:
                process.close()
        after = contents(database, columns=before)
    closed = next(case for case, was in statuses.items() if was == "CLOSED")
    assert [row for row in after["case_timeline"] if str(row["case_id"]) == closed] == [
        row for row in before["case_timeline"] if str(row["case_id"]) == closed]
    assert all(row in after["tool_call_ledger"] for row in before["tool_call_ledger"])
    moved = [row["event"] for row in after["case_timeline"] if str(row["case_id"]) == waiting]
    assert moved[-1] == "verify_pass", moved
