"""``opsgate health relay|consume`` against real ``opsgate relay`` and ``opsgate consume``
processes on PostgreSQL and Redis Streams: alive while their loops poll, one line naming the
stuck process once it is frozen (SIGSTOP) or killed, alive again when it is thawed. This is the
command compose's healthcheck and Kubernetes' exec probes run (docs/deploy.md)."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.support.deploy_doc import run_blocks
from tests.support.processes import Process, clean_env, command
from tests.support.servers import REDIS_URL

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

MAX_AGE_S = 3.0


def health(env: dict[str, str], role: str, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command("health", role, "--max-age-s", str(MAX_AGE_S), *more),
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def until(role: str, env: dict[str, str], healthy: bool, timeout_s: float = 30) -> str:
    """Run the check until it says what is expected; its one line."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = health(env, role)
        said = (result.stdout + result.stderr).strip()
        if (result.returncode == 0) == healthy:
            assert len(said.splitlines()) == 1, said
            return said
        assert time.monotonic() < deadline, f"health {role} still says: {said}"
        time.sleep(0.5)


def test_health_follows_the_relay_and_consume_loops(tmp_path, pg_engine, redis_prefix):
    env = clean_env(OPSGATE_DATABASE_URL=pg_engine.url.render_as_string(hide_password=False),
                    OPSGATE_REDIS_URL=REDIS_URL, OPSGATE_STREAM_PREFIX=redis_prefix,
                    OPSGATE_HEARTBEAT_DIR=str(tmp_path / "heartbeat"))
    assert "no heartbeat at" in until("relay", env, healthy=False, timeout_s=0)
    relay = Process("relay", ("relay",), env, tmp_path / "relay.log")
    consume = Process("consume", ("consume", "intake", "notifier", "--workers", "2"), env,
                      tmp_path / "consume.log")
    try:
        relay.start()
        consume.start()
        said = until("relay", env, healthy=True)
        assert said.startswith("relay (pid ") and "alive; 1 loops polled within" in said, said
        said = until("consume", env, healthy=True)
        assert "alive; 4 loops polled within" in said and "lag 0.0s" in said, said
        ready = health(env, "relay", "--max-lag-s", "60")
        assert ready.returncode == 0, ready.stderr
        documented = run_blocks("Health of each process", tmp_path,
                                OPSGATE_HEARTBEAT_DIR=env["OPSGATE_HEARTBEAT_DIR"])
        assert documented.count(": alive; ") == 2, documented

        consume.freeze()  # whichever goes stale first, the file or a loop's last poll, is named
        said = until("consume", env, healthy=False)
        assert said.startswith("opsgate: error: consume (pid ") and "stuck" in said, said
        assert "alive" in until("relay", env, healthy=True)
        consume.thaw()
        assert "alive" in until("consume", env, healthy=True)

        relay.kill9()  # whichever goes stale first, the file or the loop's last poll, is named
        said = until("relay", env, healthy=False)
        assert said.startswith("opsgate: error: relay (pid ") and "stuck" in said, said
        assert consume.terminate() == 0
    finally:
        relay.close()
        consume.close()
