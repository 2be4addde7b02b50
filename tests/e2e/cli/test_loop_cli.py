"""``opsgate relay``, ``opsgate consume`` and ``opsgate outbox dead`` as an operator runs them:
real subprocesses, the real PostgreSQL and Redis on 127.0.0.1, clear refusals."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest
from sqlalchemy import insert, select

from core.db.database import make_engine
from core.db.tables import inbox as inbox_table
from core.db.tables import outbox
from core.messaging import inbox
from core.messaging.envelope import Envelope
from core.migrate import upgrade_engine
from tests.support.metrics import STAND_IN_ENV
from tests.support.peers import free_port
from tests.support.processes import Process, clean_env, command
from tests.support.servers import REDIS_URL


def opsgate(cwd, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), cwd=cwd, env=clean_env(**env), capture_output=True,
                          text=True, timeout=120, check=False)


def test_help_explains_the_loop_commands(tmp_path):
    listed = opsgate(tmp_path, "--help").stdout
    for name in ("relay", "consume", "outbox"):
        assert name in listed
    relay = opsgate(tmp_path, "relay", "--help").stdout
    for words in ("SKIP LOCKED", "OPSGATE_RELAY_POLL_S", "OPSGATE_REDIS_URL", "SIGTERM"):
        assert words in " ".join(relay.split()), relay
    consume = " ".join(opsgate(tmp_path, "consume", "--help").stdout.split())
    for words in ("intake", "executor", "notifier", "XAUTOCLAIM", "--workers", "dead letter"):
        assert words in consume, consume
    dead = " ".join(opsgate(tmp_path, "outbox", "dead", "--help").stdout.split())
    assert "--requeue ID" in dead and "unpublished" in dead


@pytest.mark.parametrize("subcommand", ["relay", "consume"])
def test_the_production_loop_refuses_to_start_without_redis(tmp_path, subcommand):
    result = opsgate(tmp_path, subcommand)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"opsgate: error: {subcommand} needs OPSGATE_BUS_URL (NATS JetStream) or "
        "OPSGATE_REDIS_URL (Redis Streams) to carry the messages between processes; without "
        "either the loop runs in-process inside `opsgate serve`"]


def test_relay_refuses_an_unreachable_redis(tmp_path):
    result = opsgate(tmp_path, "relay", OPSGATE_REDIS_URL="redis://127.0.0.1:1/0")
    assert result.returncode == 1
    assert "Redis at redis://127.0.0.1:1/0 is not reachable" in result.stderr


@pytest.mark.postgres
@pytest.mark.redis
def test_relay_process_publishes_in_order_and_stops_on_sigterm(tmp_path, pg_engine,
                                                              redis_client, redis_prefix):
    with pg_engine.begin() as conn:
        conn.execute(insert(outbox), [{"topic": "t.one", "key": "k", "payload": {"n": n}}
                                      for n in range(5)])
    env = clean_env(OPSGATE_DATABASE_URL=pg_engine.url.render_as_string(hide_password=False),
                    OPSGATE_REDIS_URL=REDIS_URL, OPSGATE_STREAM_PREFIX=redis_prefix,
                    OPSGATE_RELAY_POLL_S="30")
    relay = Process("relay", ("relay", "--progress-s", "0.2"), env, tmp_path / "relay.log")
    stream = f"{redis_prefix}t.one"
    try:
        relay.start()
        relay.wait_for_output("5 messages waiting")
        _wait(lambda: redis_client.xlen(stream) == 5)
        with pg_engine.begin() as conn:  # woken by NOTIFY, not the 30 s poll
            conn.execute(insert(outbox).values(topic="t.one", key="k", payload={"n": 5}))
        _wait(lambda: redis_client.xlen(stream) == 6, 10)
        relay.wait_for_output("relay: 6 messages published")
        assert relay.terminate() == 0
    finally:
        relay.close()
    entries = redis_client.xrange(stream)
    payloads = [Envelope.from_fields({k.decode(): v.decode() for k, v in fields.items()})
                for _id, fields in entries]
    assert [p.payload["n"] for p in payloads] == list(range(6))
    assert [p.message_id for p in payloads] == sorted(p.message_id for p in payloads)
    with pg_engine.connect() as conn:
        assert conn.execute(select(outbox.c.id).where(outbox.c.published_at.is_(None))
                            ).all() == []
    assert "relay: stopped after publishing 6 messages" in relay.output()


def _wait(done, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_outbox_dead_lists_and_requeues_a_dead_letter(tmp_path):
    url = f"sqlite:///{tmp_path}/opsgate.db"
    engine = make_engine(url)
    upgrade_engine(engine)
    with engine.begin() as conn:
        message_id = conn.execute(insert(outbox).values(
            topic="cmd.exec.run", key="case-7", payload={"case_id": "case-7", "version": 4},
        ).returning(outbox.c.id)).scalar_one()
        conn.execute(outbox.update().values(published_at=outbox.c.created_at))
        envelope = Envelope(message_id, "cmd.exec.run", "case-7", {"case_id": "case-7"})
        inbox.bury(conn, "executor", envelope, "ValueError: no\nsuch step", 4)
    try:
        listed = opsgate(tmp_path, "outbox", "dead", "--database-url", url)
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.strip().splitlines()
        header, row = lines[-2:]
        assert header.split() == ["ID", "CONSUMER", "MESSAGE", "TOPIC", "CASE", "ATTEMPTS",
                                  "DIED", "REQUEUED", "ERROR"]
        assert row.split()[:6] == ["1", "executor", str(message_id), "cmd.exec.run", "case-7",
                                   "4"]
        assert row.endswith("ValueError: no such step")

        unknown = opsgate(tmp_path, "outbox", "dead", "--requeue", "99", "--database-url", url)
        assert unknown.returncode == 1
        assert "no dead letter 99" in unknown.stderr

        requeued = opsgate(tmp_path, "outbox", "dead", "--requeue", "1", "--database-url", url)
        assert requeued.returncode == 0, requeued.stderr
        assert f"message {message_id} (cmd.exec.run, case case-7)" in requeued.stdout
        with engine.connect() as conn:
            assert conn.execute(select(outbox.c.published_at)).scalar_one() is None
            assert conn.execute(select(inbox_table)).all() == []
        again = opsgate(tmp_path, "outbox", "dead", "--database-url", url)
        assert again.stdout.strip().splitlines()[-1] == "no dead letters"
        everything = opsgate(tmp_path, "outbox", "dead", "--all", "--database-url", url)
        assert everything.stdout.strip().splitlines()[-1].split()[6] != "-"
    finally:
        engine.dispose()


def test_serve_runs_the_loop_in_process_and_a_case_closes_by_itself(tmp_path):
    port = free_port()
    # No runbooks: the offline agent then plans the noop template, which auto-approval takes.
    (tmp_path / "no-runbooks").mkdir()
    # The noop plan's verify window (60 s after the change) on a fast clock: 0.6 s.
    env = clean_env(OPSGATE_AUTO_APPROVE="noop_only",
                    OPSGATE_RUNBOOKS_DIR=str(tmp_path / "no-runbooks"),
                    OPSGATE_VERIFY_TIME_SCALE="0.01", OPSGATE_VERIFY_POLL_S="0.5",
                    **STAND_IN_ENV)
    serve = Process("serve", ("serve", "--port", str(port)), env, tmp_path / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        serve.start()
        serve.wait_for_output("loop: in-process relay and consumers running")
        _wait(lambda: _answers(f"{base}/healthz"), 60)
        created = httpx.post(f"{base}/case/create", json={"title": "checkout is slow",
                                                           "actor": "pagerduty"},
                             headers={"Idempotency-Key": "serve-loop-1"})
        assert created.status_code == 201, created.text
        case_url = f"{base}/case/{created.json()['data']['case_id']}"
        _wait(lambda: httpx.get(case_url).json()["data"]["status"] == "CLOSED", 30)
        assert serve.terminate() == 0
    finally:
        serve.close()
    assert "intake, analyst, planner, gatekeeper, executor, verifier, notifier" in serve.output()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False
