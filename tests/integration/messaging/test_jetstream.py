"""The JetStream bus against a real ``nats-server -js`` of the test's own (free port, own store):
the relay's publications and their acknowledgments, duplicates dropped, durable consumers with
explicit acks after the inbox, in-progress acks for a slow step, the last delivery buried as a
dead letter, a server restarted on its store, and the one-line setup errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert

from core.db.tables import outbox
from core.errors import Unavailable
from core.messaging import inbox
from core.messaging.consumer import ConsumerRunner, Delivery
from core.messaging.envelope import Envelope
from core.messaging.jetstream.bus import JetStreamBus
from core.messaging.jetstream.config import JetStreamConfig, JetStreamSetupError
from core.messaging.jetstream.reader import JetStreamReader
from core.messaging.jetstream.wire import decode
from core.messaging.outbox import unpublished
from core.messaging.relay import OutboxRelay
from tests.support.nats_server import NatsServer
from tests.support.peers import poll

pytestmark = pytest.mark.nats

TOPIC = "cmd.plan.generate"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(tmp_path) as server:
        yield server


def connected(server: NatsServer, **config: object) -> JetStreamBus:
    return JetStreamBus(JetStreamConfig((server.url,), **config)).connect()  # type: ignore[arg-type]


class Recorder:
    """A consumer that records what it handled; ``hold`` makes it wait inside the handler."""

    name = "planner"
    topics = (TOPIC,)

    def __init__(self) -> None:
        self.handled: list[int] = []
        self.hold = threading.Event()
        self.hold.set()
        self.inside = threading.Event()

    def handle(self, delivery: Delivery) -> None:
        self.inside.set()
        self.hold.wait(30)
        if delivery.envelope.payload.get("poison"):
            raise ValueError("cannot parse this payload")
        self.handled.append(delivery.envelope.message_id)


def write_rows(engine: Engine, count: int) -> None:
    with engine.begin() as conn:
        conn.execute(insert(outbox), [{"topic": TOPIC, "key": f"case-{n}", "payload": {"n": n}}
                                      for n in range(count)])


def stream_messages(bus: JetStreamBus) -> int:
    info = bus._call(bus.js.stream_info(bus.config.stream(TOPIC)), 5)
    return int(info.state.messages)


def test_relay_marks_rows_published_on_the_servers_ack_and_a_retry_is_dropped(
        sqlite_engine: Engine, nats_server: NatsServer):
    bus = connected(nats_server)
    try:
        write_rows(sqlite_engine, 5)
        assert OutboxRelay(sqlite_engine, bus).drain() == 5
        assert unpublished(sqlite_engine) == 0
        assert stream_messages(bus) == 5
        # The relay's own retry of the same publication (a crash before its commit): dropped
        # by the duplicate window. A resend on purpose (the next publication) goes through.
        bus.publish([Envelope(1, TOPIC, "case-0", {"n": 0}, 1)])
        assert stream_messages(bus) == 5
        bus.publish([Envelope(1, TOPIC, "case-0", {"n": 0}, 2)])
        assert stream_messages(bus) == 6
    finally:
        bus.close()


class AckLost:
    """The bus, but the answer to its first publish is lost: the server stored the batch and
    the relay sees an outage (a publish acknowledgment that timed out)."""

    def __init__(self, bus: JetStreamBus) -> None:
        self.bus = bus
        self.lost = False

    def publish(self, envelopes) -> None:
        self.bus.publish(envelopes)
        if not self.lost:
            self.lost = True
            raise Unavailable("JetStream: TimeoutError (the acknowledgment was lost)")


@pytest.mark.parametrize("database", ["sqlite_engine",
                                      pytest.param("pg_engine", marks=pytest.mark.postgres)])
def test_the_relays_own_retry_after_a_lost_ack_keeps_its_msg_id_and_is_dropped(
        database: str, request: pytest.FixtureRequest, nats_server: NatsServer):
    """A failed publish leaves its rows as they were (PostgreSQL rolls the claim's marks back;
    SQLite marks only after the publish), so the retry sends the same publication numbers, the
    same ``Nats-Msg-Id``s, and the duplicate window drops them: no second copy in the stream."""
    engine: Engine = request.getfixturevalue(database)
    bus = connected(nats_server)
    try:
        write_rows(engine, 3)
        relay = OutboxRelay(engine, AckLost(bus))  # type: ignore[arg-type]
        with pytest.raises(Unavailable):
            relay.relay_batch()
        assert stream_messages(bus) == 3
        assert unpublished(engine) == 3
        assert relay.drain() == 3
        assert unpublished(engine) == 0
        assert stream_messages(bus) == 3
    finally:
        bus.close()


def test_rows_stay_unpublished_while_the_server_is_down(sqlite_engine: Engine,
                                                        nats_server: NatsServer):
    bus = connected(nats_server, timeout_s=1.0)
    try:
        bus.ensure_streams([TOPIC])
        nats_server.kill9()
        write_rows(sqlite_engine, 3)
        with pytest.raises(Unavailable):
            OutboxRelay(sqlite_engine, bus).drain()
        assert unpublished(sqlite_engine) == 3
        nats_server.start()  # the same store: the stream is still there
        poll(lambda: bus.connected, 15, "the bus to reconnect")
        poll(lambda: _drained(sqlite_engine, bus), 15, "the relay to publish after the restart")
        assert unpublished(sqlite_engine) == 0
        assert stream_messages(bus) == 3
    finally:
        bus.close()


def _drained(engine: Engine, bus: JetStreamBus) -> bool:
    try:
        OutboxRelay(engine, bus).drain()
    except Unavailable:
        return False
    return True


def test_a_reader_acknowledges_after_the_inbox_and_a_restart_keeps_the_consumer(
        sqlite_engine: Engine, nats_server: NatsServer):
    bus = connected(nats_server)
    consumer = Recorder()
    reader = JetStreamReader(bus, ConsumerRunner(sqlite_engine, consumer), TOPIC, wait_s=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=reader.run, args=(stop,), daemon=True)
    try:
        write_rows(sqlite_engine, 4)
        OutboxRelay(sqlite_engine, bus).drain()
        thread.start()
        poll(lambda: len(consumer.handled) == 4, 15, "four messages handled")
        states = poll(lambda: _settled(bus), 10, "every message acknowledged")
        assert states["planner"]["redelivered"] == 0
        with sqlite_engine.connect() as conn:
            assert all(inbox.seen(conn, "planner", n) for n in consumer.handled)

        nats_server.restart()  # kill -9, then the same store
        write_rows(sqlite_engine, 2)
        poll(lambda: _drained(sqlite_engine, bus), 20, "the relay to publish after the restart")
        poll(lambda: len(consumer.handled) == 6, 20, "the reader to go on after the restart")
        assert sorted(consumer.handled) == sorted(set(consumer.handled))  # nothing twice
    finally:
        stop.set()
        thread.join(5)
        bus.close()


def test_a_reader_whose_server_lost_its_store_creates_its_consumer_again_and_reads_on(
        sqlite_engine: Engine, nats_server: NatsServer):
    """The server comes back on an empty store: the relay (a bus of its own, as in its own
    process) creates the stream again before publishing; the reader, whose pull requests now go
    to a consumer nobody has, finds it gone and creates it again with the same settings."""
    relay_bus, reader_bus = connected(nats_server), connected(nats_server)
    consumer = Recorder()
    reader = JetStreamReader(reader_bus, ConsumerRunner(sqlite_engine, consumer), TOPIC,
                             wait_s=0.2, check_every_s=0.5)
    stop = threading.Event()
    thread = threading.Thread(target=reader.run, args=(stop,), daemon=True)
    try:
        write_rows(sqlite_engine, 3)
        OutboxRelay(sqlite_engine, relay_bus).drain()
        thread.start()
        poll(lambda: len(consumer.handled) == 3, 15, "three messages handled")

        nats_server.restart_empty()
        poll(lambda: reader_bus.connected and relay_bus.connected, 15, "both to reconnect")
        write_rows(sqlite_engine, 2)
        poll(lambda: _drained(sqlite_engine, relay_bus), 20, "the relay to publish again")
        poll(lambda: len(consumer.handled) == 5, 20, "the reader to read after the wipe")
        assert sorted(consumer.handled) == [1, 2, 3, 4, 5]
        config = reader_bus.js.consumer_info(reader_bus.config.stream(TOPIC), "planner")
        info = reader_bus._call(config, 5)
        assert info.config.ack_wait == reader_bus.config.ack_wait_s  # the same settings
        assert info.config.max_deliver == reader_bus.config.max_deliver
    finally:
        stop.set()
        thread.join(5)
        relay_bus.close()
        reader_bus.close()


def test_the_relay_creates_a_lost_stream_with_its_consumers_before_publishing(
        sqlite_engine: Engine, nats_server: NatsServer):
    """On interest retention a message published to a stream with no consumer is dropped at
    once: the relay's bus creates a lost stream again with the durable consumers it made sure
    of at start, and only then publishes, so the message waits for its reader."""
    relay_bus = connected(nats_server, retention="interest")
    try:
        relay_bus.ensure_consumers({"planner": [TOPIC]})  # what `opsgate relay` does at start
        nats_server.restart_empty()
        poll(lambda: relay_bus.connected, 15, "the relay's bus to reconnect")
        write_rows(sqlite_engine, 2)
        poll(lambda: _drained(sqlite_engine, relay_bus), 20, "the relay to publish again")
        assert stream_messages(relay_bus) == 2
        assert relay_bus.consumer_states({"planner": [TOPIC]})["planner"]["pending"] == 2
    finally:
        relay_bus.close()


def decode_id(msg) -> int:
    return decode(msg.data).message_id


def _settled(bus: JetStreamBus) -> dict[str, dict[str, object]] | None:
    states = bus.consumer_states({"planner": [TOPIC]})
    planner = states["planner"]
    return states if planner["pending"] == 0 and planner["unacked"] == 0 else None


def test_a_slow_step_says_in_progress_and_is_not_delivered_again(sqlite_engine: Engine,
                                                                  nats_server: NatsServer):
    bus = connected(nats_server, ack_wait_s=1.0)
    consumer = Recorder()
    consumer.hold.clear()
    reader = JetStreamReader(bus, ConsumerRunner(sqlite_engine, consumer), TOPIC, wait_s=0.2)
    other = JetStreamReader(bus, ConsumerRunner(sqlite_engine, consumer), TOPIC, wait_s=0.2)
    stop = threading.Event()
    threads = [threading.Thread(target=r.run, args=(stop,), daemon=True) for r in (reader, other)]
    try:
        write_rows(sqlite_engine, 1)
        OutboxRelay(sqlite_engine, bus).drain()
        for thread in threads:
            thread.start()
        assert consumer.inside.wait(10)
        # Three AckWaits inside the handler: without in-progress acks the other reader would
        # have been handed the message again by now.
        stop.wait(3.0)
        assert bus.consumer_states({"planner": [TOPIC]})["planner"]["redelivered"] == 0
        consumer.hold.set()
        poll(lambda: _settled(bus), 10, "the message acknowledged")
        assert len(consumer.handled) == 1
    finally:
        consumer.hold.set()
        stop.set()
        for thread in threads:
            thread.join(5)
        bus.close()


def test_the_last_delivery_is_buried_as_a_dead_letter_and_others_go_on(sqlite_engine: Engine,
                                                                        nats_server: NatsServer):
    """A consumer that dies on message 1 each time (fetched, never acknowledged) while message 2
    is handled at once: message 1's third delivery is buried as a dead letter and message 2 is
    handled once. JetStream delivers at least once: on a starved machine message 2 can come
    again after its ack (the ack raced AckWait) and a fetch can time out (the deliveries it took
    come again after AckWait), so, as the reader's loop does, every delivery of message 2 goes to
    the reader (its inbox drops a repeat) and a timed-out fetch is asked again."""
    bus = connected(nats_server, ack_wait_s=1.0, max_deliver=3)
    try:
        write_rows(sqlite_engine, 2)
        OutboxRelay(sqlite_engine, bus).drain()
        subscription = bus.subscribe("planner", TOPIC)
        consumer = Recorder()
        reader = JetStreamReader(bus, ConsumerRunner(sqlite_engine, consumer), TOPIC, wait_s=0.5)
        deliveries_of_1: list[int] = []
        deadline = time.monotonic() + 30
        while 3 not in deliveries_of_1 and time.monotonic() < deadline:
            for msg in _fetched(bus, subscription):
                if decode_id(msg) == 1:
                    deliveries_of_1.append(msg.metadata.num_delivered)
                if decode_id(msg) == 2 or msg.metadata.num_delivered >= 3:
                    reader.handle([msg])
        # Its last delivery came (a delivery taken by a fetch that timed out is not seen here:
        # it comes again after AckWait, counted).
        assert deliveries_of_1 and deliveries_of_1[-1] == 3, deliveries_of_1
        poll(lambda: _settled(bus), 10, "every message settled")
        letters = inbox.dead_letters(sqlite_engine)
        assert [(row["consumer"], row["message_id"]) for row in letters] == [("planner", 1)]
        assert "delivered 3 times by JetStream" in letters[0]["error"]
        assert consumer.handled == [2]
    finally:
        bus.close()


def _fetched(bus: JetStreamBus, subscription) -> list:
    """One fetch of up to 10 messages; [] when it timed out (asked again, as the reader does)."""
    try:
        return bus.fetch(subscription, 10, 1.0)
    except Unavailable:
        return []


def test_no_jetstream_and_a_stream_that_disagrees_are_one_line_each(tmp_path: Path,
                                                                    nats_server: NatsServer):
    (tmp_path / "plain").mkdir()
    with NatsServer(tmp_path / "plain", jetstream=False) as plain, \
            pytest.raises(JetStreamSetupError) as no_js:
        connected(plain)
    assert str(no_js.value).startswith(f"NATS at {plain.url} has no JetStream: start nats-server")
    bus = connected(nats_server)
    bus.ensure_streams([TOPIC])
    bus.close()
    three = connected(nats_server, replicas=3)
    try:
        with pytest.raises(JetStreamSetupError) as wrong:
            three.ensure_streams([TOPIC])
    finally:
        three.close()
    assert "\n" not in str(wrong.value)
    assert "has 1 replica(s) (OPSGATE_JETSTREAM_REPLICAS is 3)" in str(wrong.value)


def test_a_cluster_without_its_leader_is_unavailable_not_a_server_without_jetstream(
        tmp_path: Path):
    """One node of three up: NATS answers, JetStream does not (no quorum to elect its leader).
    That passes, so it is ``Unavailable`` (retried, or a process restarted), never the setup
    error that tells the operator to enable JetStream."""
    from tests.support.nats_server import NatsCluster

    cluster = NatsCluster(tmp_path)
    alone = cluster.nodes[0].start()
    try:
        with pytest.raises(Unavailable) as down:
            connected(alone, timeout_s=1.0)
    finally:
        alone.stop()
    assert not isinstance(down.value, JetStreamSetupError)
    assert str(down.value).startswith(f"NATS at {alone.url} answers, but its JetStream did "
                                      "not within 1s: a cluster without a leader")


def test_readyz_reports_the_connection_and_each_consumers_counts(nats_server: NatsServer):
    """Every consumer's counts; not ok while a durable consumer is missing (before the relay
    created them, after the server lost its store), nor while the server is down."""
    from datetime import UTC, datetime

    from core.consumers import subscriptions
    from core.ops.readiness import check_jetstream
    from core.settings import Settings

    settings = Settings(_env_file=None, bus_url=nats_server.url)
    bus = connected(nats_server)
    try:
        bus.ensure_consumers({"planner": [TOPIC]})
        only_planner = check_jetstream(settings, datetime.now(UTC))
        assert only_planner["ok"] is False
        assert only_planner["error"].startswith("durable consumers missing on the server")
        assert "opsgate_evt_case_opened_v1 (intake)" in only_planner["error"]
        bus.ensure_consumers(subscriptions())  # what the relay does at start
        bus.publish([Envelope(7, TOPIC, "case-7", {}, 1)])
        held = bus.fetch(bus.subscribe("planner", TOPIC), 1, 2.0)
        assert len(held) == 1
        check = check_jetstream(settings, datetime.now(UTC))
        assert check["ok"] is True and check["kind"] == "jetstream"
        planner = check["consumers"]["planner"]
        assert planner["unacked"] == 1 and planner["pending"] == 0
        assert planner["oldest_unacked_s"] >= 0
    finally:
        bus.close()
    nats_server.restart_empty()
    wiped = check_jetstream(settings, datetime.now(UTC))
    assert wiped["ok"] is False and "(planner)" in wiped["error"]
    assert wiped["consumers"]["planner"]["missing"] == ["opsgate_cmd_plan_generate"]
    nats_server.kill9()
    down = check_jetstream(settings, datetime.now(UTC))
    assert down["ok"] is False
    assert down["error"].startswith(f"NATS at {nats_server.url} is not reachable")


def test_a_stream_whose_max_age_and_duplicate_window_disagree_is_one_line(
        nats_server: NatsServer):
    bus = connected(nats_server)
    bus.ensure_streams([TOPIC])  # a week, two minutes: the defaults
    bus.close()
    other = connected(nats_server, max_age_s=3600.0, duplicate_window_s=30.0)
    try:
        with pytest.raises(JetStreamSetupError) as wrong:
            other.ensure_streams([TOPIC])
    finally:
        other.close()
    assert str(wrong.value) == (
        "JetStream stream opsgate_cmd_plan_generate has max age 604800 s "
        "(OPSGATE_JETSTREAM_MAX_AGE_S is 3600); duplicate window 120 s "
        "(OPSGATE_JETSTREAM_DUPLICATE_WINDOW_S is 30): change the stream (`nats stream edit "
        "opsgate_cmd_plan_generate`, or remove it while it is empty) or the settings")
    same = connected(nats_server)
    try:
        same.ensure_streams([TOPIC])  # the settings it was made with: no complaint
    finally:
        same.close()


def test_a_message_held_by_a_frozen_reader_goes_to_another_after_ack_wait_and_counts_once(
        sqlite_engine: Engine, nats_server: NatsServer):
    """A frozen consume process holds a message and says nothing (no ack, no in-progress):
    here that reader is a bare fetch never answered. After AckWait the server hands the
    message to the other reader of the same durable consumer, which handles it once."""
    bus = connected(nats_server, ack_wait_s=1.0)
    consumer = Recorder()
    stop = threading.Event()
    reader = JetStreamReader(bus, ConsumerRunner(sqlite_engine, consumer), TOPIC, wait_s=0.2)
    thread = threading.Thread(target=reader.run, args=(stop,), daemon=True)
    try:
        frozen = bus.subscribe("planner", TOPIC)
        write_rows(sqlite_engine, 1)
        OutboxRelay(sqlite_engine, bus).drain()
        held = poll(lambda: bus.fetch(frozen, 1, 0.5) or None, 10, "the frozen reader's fetch")
        assert [m.metadata.num_delivered for m in held] == [1]
        thread.start()
        poll(lambda: len(consumer.handled) == 1, 15, "the other reader to be handed it")
        poll(lambda: _settled(bus), 10, "the message acknowledged")
        assert consumer.handled == [decode_id(held[0])]
        with sqlite_engine.connect() as conn:
            assert inbox.seen(conn, "planner", consumer.handled[0])
    finally:
        stop.set()
        thread.join(5)
        bus.close()
