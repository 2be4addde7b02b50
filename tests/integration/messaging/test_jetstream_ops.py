"""The operator's resends on JetStream, as an operator runs them (``opsgate`` subprocesses with
OPSGATE_BUS_URL, a ``nats-server -js`` of the test's own): ``opsgate reconcile --repair``
re-publishes a stale outbox row and a message its consumer never recorded, ``opsgate outbox dead
--requeue`` sends a dead letter again (through the relay while its outbox row is there, straight
to JetStream once it is gone). The consumer reads every copy on the stream and takes effect
once: its inbox drops the repeat."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, insert, update

from core.db.database import make_engine
from core.db.tables import outbox
from core.messaging import inbox
from core.messaging.consumer import ConsumerRunner, Delivery
from core.messaging.envelope import Envelope
from core.messaging.jetstream.bus import JetStreamBus
from core.messaging.jetstream.config import JetStreamConfig
from core.messaging.jetstream.reader import JetStreamReader
from core.messaging.relay import OutboxRelay
from core.migrate import upgrade_engine
from tests.support.nats_server import NatsServer
from tests.support.peers import poll
from tests.support.processes import clean_env, command

pytestmark = pytest.mark.nats

TOPIC = "cmd.exec.run"
LONG_AGO = datetime.now(UTC) - timedelta(hours=1)


class Executor:
    """Stands in for the executor (the consumer of cmd.exec.run): records what took effect."""

    name = "executor"
    topics: tuple[str, ...] = (TOPIC,)

    def __init__(self) -> None:
        self.handled: list[int] = []

    def handle(self, delivery: Delivery) -> None:
        self.handled.append(delivery.envelope.message_id)


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    (tmp_path / "nats").mkdir()
    with NatsServer(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    url = f"sqlite:///{tmp_path / 'opsgate.db'}"
    engine = make_engine(url)
    upgrade_engine(engine)
    try:
        yield url, engine
    finally:
        engine.dispose()


@pytest.fixture
def bus(nats_server: NatsServer) -> Iterator[JetStreamBus]:
    bus = JetStreamBus(JetStreamConfig((nats_server.url,)), name="test").connect()
    try:
        bus.ensure_consumers({"executor": [TOPIC]})
        yield bus
    finally:
        bus.close()


def opsgate(cwd: Path, url: str, server: NatsServer,
            *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args, "--database-url", url), cwd=cwd,
                          env=clean_env(OPSGATE_BUS_URL=server.url), capture_output=True,
                          text=True, timeout=120, check=False)


def a_row(engine: Engine, **values: object) -> int:
    with engine.begin() as conn:
        return int(conn.execute(insert(outbox).values(
            topic=TOPIC, key="case-7", payload={"case_id": "case-7", "version": 4},
            created_at=LONG_AGO, **values).returning(outbox.c.id)).scalar_one())


def on_stream(bus: JetStreamBus) -> int:
    info = bus._call(bus.js.stream_info(bus.config.stream(TOPIC)), 5)
    return int(info.state.messages)


def read_everything(engine: Engine, bus: JetStreamBus, copies: int) -> Executor:
    """Run the executor's reader until its durable consumer has every one of ``copies``
    messages acknowledged; what took effect."""
    executor = Executor()
    reader = JetStreamReader(bus, ConsumerRunner(engine, executor), TOPIC, wait_s=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=reader.run, args=(stop,), daemon=True)
    thread.start()
    try:
        poll(lambda: _acknowledged(bus) == copies, 20, f"{copies} messages acknowledged")
    finally:
        stop.set()
        thread.join(5)
    return executor


def _acknowledged(bus: JetStreamBus) -> int:
    info = bus._call(bus.js.consumer_info(bus.config.stream(TOPIC), "executor"), 5)
    return int(info.ack_floor.stream_seq) if info.num_ack_pending == 0 else -1


def test_reconcile_repair_publishes_a_stale_row_to_jetstream(tmp_path: Path, nats_server,
                                                              database, bus: JetStreamBus):
    url, engine = database
    row_id = a_row(engine)
    result = opsgate(tmp_path, url, nats_server, "reconcile", "--repair")
    assert result.returncode == 1, result.stderr  # a finding, repaired
    assert f"message #{row_id}" in result.stdout and "re-published to the bus" in result.stdout
    assert on_stream(bus) == 1
    executor = read_everything(engine, bus, 1)
    assert executor.handled == [row_id]
    clean = opsgate(tmp_path, url, nats_server, "reconcile")
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_reconcile_repair_sends_an_unrecorded_message_again_and_it_takes_effect_once(
        tmp_path: Path, nats_server, database, bus: JetStreamBus):
    url, engine = database
    row_id = a_row(engine)
    # Published long ago (the server has it) but the executor never recorded it.
    assert OutboxRelay(engine, bus).drain() == 1
    with engine.begin() as conn:
        conn.execute(update(outbox).where(outbox.c.id == row_id).values(published_at=LONG_AGO))
    result = opsgate(tmp_path, url, nats_server, "reconcile", "--repair")
    assert result.returncode == 1, result.stderr
    assert "not recorded by executor" in result.stdout, result.stdout
    assert "re-published to the bus" in result.stdout, result.stdout
    assert on_stream(bus) == 2  # the resend is a new publication: not dropped as a duplicate
    executor = read_everything(engine, bus, 2)
    assert executor.handled == [row_id]  # two copies read, one took effect
    with engine.connect() as conn:
        assert inbox.seen(conn, "executor", row_id)


def bury(engine: Engine, row_id: int) -> None:
    with engine.begin() as conn:
        inbox.bury(conn, "executor", Envelope(row_id, TOPIC, "case-7", {"case_id": "case-7"}),
                   "ValueError: no such step", 4)


def test_requeue_goes_through_the_relay_to_jetstream_and_takes_effect_once(
        tmp_path: Path, nats_server, database, bus: JetStreamBus):
    url, engine = database
    row_id = a_row(engine)
    assert OutboxRelay(engine, bus).drain() == 1
    bury(engine, row_id)  # the executor gave up on it
    result = opsgate(tmp_path, url, nats_server, "outbox", "dead", "--requeue", "1")
    assert result.returncode == 0, result.stderr
    assert f"message {row_id} (cmd.exec.run, case case-7)" in result.stdout
    assert OutboxRelay(engine, bus).drain() == 1  # the row is the relay's again
    assert on_stream(bus) == 2
    executor = read_everything(engine, bus, 2)
    # The requeue forgot the dead letter's inbox entry: the first copy takes effect, the
    # second is a duplicate.
    assert executor.handled == [row_id]


def test_requeue_publishes_straight_to_jetstream_once_the_outbox_row_is_gone(
        tmp_path: Path, nats_server, database, bus: JetStreamBus):
    url, engine = database
    row_id = a_row(engine)
    assert OutboxRelay(engine, bus).drain() == 1
    bury(engine, row_id)
    with engine.begin() as conn:
        conn.execute(delete(outbox).where(outbox.c.id == row_id))
    result = opsgate(tmp_path, url, nats_server, "outbox", "dead", "--requeue", "1")
    assert result.returncode == 0, result.stderr
    assert on_stream(bus) == 2
    executor = read_everything(engine, bus, 2)
    assert executor.handled == [row_id]
    # Dead again and requeued again at once (within the duplicate window): a second resend on
    # purpose, not a relay's retry; JetStream must not drop it.
    bury(engine, row_id)
    again = opsgate(tmp_path, url, nats_server, "outbox", "dead", "--requeue", "1")
    assert again.returncode == 0, again.stderr
    assert on_stream(bus) == 3
    assert read_everything(engine, bus, 3).handled == [row_id]
