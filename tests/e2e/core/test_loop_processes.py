"""The closed loop end to end on PostgreSQL + Redis Streams, with real ``opsgate relay`` and
``opsgate consume`` processes: 200 cases run their whole life at once, each plan's one step an
``http.request`` to a server on 127.0.0.1 that counts requests by Idempotency-Key.

Then the same with kill -9 of the relay and of consumer processes at random moments, restarted
each time: every case still ends CLOSED or PARKED, no step's request is sent twice, no outbox row
stays unpublished and no message is lost (every consumer's inbox holds every message of its
topics, every stream's pending list drains, every case's timeline is complete).

The planner is the one consumer run inside the test (a real stream consumer in the ``planner``
group): it proposes the plan whose step calls the counting server, whose port only the test knows.
Both runs go once on Redis Streams and once on NATS JetStream (OPSGATE_BUS_URL, a nats-server -js
of the test's own on a free port with its own store; fewer cases there, the suite's time being
short).

Bounded: 200 cases (24 on JetStream), a few kills, deadlines of a minute or two; only 127.0.0.1.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import redis
from sqlalchemy import Engine, select, text

from core.bootstrap import App, bootstrap
from core.consumers import build_consumers
from core.db.tables import case_timeline
from core.domain.commands import OpenCase
from core.domain.fsm import CaseStatus
from core.domain.messages import Topic
from core.loop_processes import stream_bus, streams_client
from core.messaging import inbox
from core.messaging.consumer import HELD, ConsumerRunner
from core.messaging.jetstream.bus import JetStreamBus
from core.messaging.jetstream.config import JetStreamConfig
from core.messaging.jetstream.reader import JetStreamReader
from core.messaging.streams import StreamConsumer
from core.ops.readiness import readiness
from core.ops.reconcile import Reconciler
from core.settings import Settings
from tests.support.local_http import LocalServer, local_server
from tests.support.loop_processes import (
    FINAL,
    PROCESS_CONSUMERS,
    EffectPlanner,
    _effect,
    requests_by_case,
    statuses,
    undelivered,
    wait_until,
)
from tests.support.metrics import STAND_IN_ENV, STAND_IN_METRICS
from tests.support.nats_server import NatsCluster, NatsServer
from tests.support.processes import Process, clean_env
from tests.support.servers import REDIS_URL

# Group "heavy": make test's two workers never run two of its files at once (Makefile).
pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.loop]

CASES = 200
CASES_ON = {"redis": CASES, "jetstream": 24}
FREEZE_BATCHES = 5
FEED = 4  # cases opened at a time to keep a chaos run busy until its kills came
REDELIVERED = "delivered again (delivery 2)"
RUN_DEADLINE_S = 120.0
SETTLE_DEADLINE_S = 60.0
CLOSED_LIFE = ["case_opened", "start_analysis", "analysis_done", "plan_ready", "gate_approved",
               "step_result", "exec_done", "verify_result", "verify_pass"]


# -- the world of one run --------------------------------------------------------------------


@dataclass
class World:
    app: App
    engine: Engine
    redis: redis.Redis
    server: LocalServer
    relay: Process
    consumers: list[Process]
    jetstream: JetStreamBus | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return CASES_ON["jetstream" if self.jetstream else "redis"]

    @property
    def processes(self) -> list[Process]:
        return [self.relay, *self.consumers]

    def start(self) -> None:
        for process in self.processes:
            process.start()
        self.wait_up()
        self._start_planner()

    def wait_up(self) -> None:
        """Until every process, since its latest start, says it is working (a SIGTERM before
        that meets Python's default handler, not opsgate's clean stop)."""
        self.relay.wait_for_output("messages waiting")
        for process in self.consumers:
            process.wait_for_output("reader(s) each) on")

    def _start_planner(self) -> None:
        runner = ConsumerRunner(self.engine, EffectPlanner(self.app, self.server.url("/effect")))
        if self.jetstream is not None:
            for _worker in range(2):
                reader = JetStreamReader(self.jetstream, runner, Topic.PLAN_GENERATE,
                                         wait_s=0.2)
                thread = threading.Thread(target=reader.run, args=(self.stop,), daemon=True)
                thread.start()
                self.threads.append(thread)
            return
        bus = stream_bus(self.app.settings, streams_client(REDIS_URL))
        for worker in range(2):
            stream = StreamConsumer(bus, runner, block_ms=200, claim_idle_ms=2000,
                                    name=f"test-planner-{worker}")
            thread = threading.Thread(target=stream.run, args=(self.stop,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def open_cases(self, count: int) -> list[UUID]:
        run = uuid.uuid4().hex[:8]

        def open_one(n: int) -> UUID:
            reply = self.app.cases.open_case(
                OpenCase(title=f"checkout errors, shard {n}", actor="pagerduty"),
                f"e2e-{run}-{n}")
            return UUID(reply.data()["case_id"])

        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(open_one, range(count)))

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)
        for process in self.processes:
            process.close()
        if self.jetstream is not None:
            self.jetstream.close()


@pytest.fixture(params=["redis", pytest.param("jetstream", marks=pytest.mark.nats)])
def nats_server(request: pytest.FixtureRequest,
                tmp_path: Path) -> Iterator[NatsServer | NatsCluster | None]:
    """None on Redis Streams (the shared Redis); on JetStream a nats-server of the test's own;
    on ``cluster`` (asked for by name) three, routed to each other."""
    if request.param == "redis":
        yield None
        return
    (tmp_path / "nats").mkdir()
    own = NatsCluster(tmp_path / "nats") if request.param == "cluster" else NatsServer(
        tmp_path / "nats")
    with own as server:
        yield server


@pytest.fixture
def bus_knobs(request: pytest.FixtureRequest,
              nats_server: NatsServer | NatsCluster | None) -> dict[str, str]:
    """JetStream's AckWait is short, so a killed consumer's messages come back within seconds;
    on a cluster every stream has three replicas; a test may add settings of its own (indirect
    parametrization)."""
    if nats_server is None:
        return {}
    replicas = "3" if isinstance(nats_server, NatsCluster) else "1"
    return {"OPSGATE_BUS_URL": nats_server.url, "OPSGATE_JETSTREAM_ACK_WAIT_S": "3",
            "OPSGATE_JETSTREAM_REPLICAS": replicas, **getattr(request, "param", {})}


@pytest.fixture
def world(tmp_path: Path, pg_engine: Engine, redis_client, redis_prefix: str,
          bus_knobs: dict[str, str]) -> Iterator[World]:
    with local_server({"/effect": _effect}) as server:
        url = pg_engine.url.render_as_string(hide_password=False)
        knobs = {
            "OPSGATE_DATABASE_URL": url, "OPSGATE_REDIS_URL": REDIS_URL,
            "OPSGATE_STREAM_PREFIX": f"{redis_prefix}stream:",
            "OPSGATE_GATEWAY_KEY_PREFIX": f"{redis_prefix}gw:",
            "OPSGATE_AUTO_APPROVE": "low_risk",
            "OPSGATE_HTTP_ALLOWLIST": json.dumps([server.base + "/"]),
            "OPSGATE_RELAY_POLL_S": "0.5", "OPSGATE_STREAM_CLAIM_IDLE_S": "2",
            "OPSGATE_DB_POOL_SIZE": "12", **STAND_IN_ENV, **bus_knobs,
        }
        settings = Settings(database_url=url, redis_url=REDIS_URL,
                            stream_prefix=knobs["OPSGATE_STREAM_PREFIX"],
                            gateway_key_prefix=knobs["OPSGATE_GATEWAY_KEY_PREFIX"],
                            auto_approve="low_risk", http_allowlist=[server.base + "/"],
                            static_metrics=STAND_IN_METRICS,
                            bus_url=bus_knobs.get("OPSGATE_BUS_URL"),
                            jetstream_ack_wait_s=float(
                                bus_knobs.get("OPSGATE_JETSTREAM_ACK_WAIT_S", 30)),
                            delivery_bound_s=float(
                                bus_knobs.get("OPSGATE_DELIVERY_BOUND_S", 120)),
                            jetstream_replicas=int(
                                bus_knobs.get("OPSGATE_JETSTREAM_REPLICAS", 1)))
        app = bootstrap(settings, engine=pg_engine)
        jetstream = (JetStreamBus(JetStreamConfig.of(settings), name="e2e-planner").connect()
                     if settings.bus_url else None)
        env = clean_env(**knobs)
        relay = Process("relay", ("relay", "--progress-s", "2"), env, tmp_path / "relay.log")
        consumers = [Process(f"consume-{n}", ("consume", *PROCESS_CONSUMERS, "--workers", "2",
                                              "--progress-s", "5"),
                             env, tmp_path / f"consume-{n}.log") for n in (1, 2)]
        loop = World(app, pg_engine, redis_client, server, relay, consumers, jetstream)
        try:
            loop.start()
            yield loop
        finally:
            loop.close()
            app.gateway.close()


# -- waiting and checking --------------------------------------------------------------------


def all_final(engine: Engine, case_ids: list[UUID]) -> bool:
    return all(status in FINAL for status in statuses(engine, case_ids).values())


def timelines(engine: Engine) -> dict[UUID, list[str]]:
    with engine.connect() as conn:
        rows = conn.execute(select(case_timeline.c.case_id, case_timeline.c.event)
                            .order_by(case_timeline.c.id)).all()
    events: dict[UUID, list[str]] = defaultdict(list)
    for row in rows:
        events[row.case_id].append(row.event)
    return events


def park_reason(engine: Engine, case_id: UUID) -> str:
    with engine.connect() as conn:
        return str(conn.execute(select(case_timeline.c.reason)
                                .where(case_timeline.c.case_id == case_id)
                                .order_by(case_timeline.c.id.desc()).limit(1)).scalar_one())


def unpublished(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("select count(*) from outbox where published_at is null"))
                   .scalar_one())


def pending_entries(world: World, topics_of: dict[str, tuple[str, ...]]) -> int:
    if world.jetstream is not None:
        states = world.jetstream.consumer_states(topics_of)
        return sum(state["pending"] + state["unacked"] for state in states.values())
    client, prefix = world.redis, world.app.settings.stream_prefix
    total = 0
    for consumer, topics in topics_of.items():
        for topic in topics:
            stream = f"{prefix}{topic}"
            if client.exists(stream):
                total += int(client.xpending(stream, consumer)["pending"])
    return total


def check_the_run(world: World, case_ids: list[UUID], *, chaos: bool) -> dict[str, Any]:
    """Everything the loop promises, checked after every case ended; returns a summary."""
    topics_of = {consumer.name: consumer.topics for consumer in build_consumers(world.app)}
    wait_until(lambda: unpublished(world.engine) == 0, SETTLE_DEADLINE_S,
               "for the outbox to drain")
    wait_until(lambda: not undelivered(world.engine, topics_of), SETTLE_DEADLINE_S,
               f"for every message to reach its consumers ({undelivered(world.engine, topics_of)}"
               " missing when the wait began)")
    wait_until(lambda: pending_entries(world, topics_of) == 0, SETTLE_DEADLINE_S,
               "for every stream entry to be acknowledged")

    final = statuses(world.engine, case_ids)
    counted = Counter(final.values())
    if chaos:
        assert set(counted) <= set(FINAL), counted
    else:
        assert counted == {CaseStatus.CLOSED: world.cases}, counted

    keys, by_case = requests_by_case(world.server)
    twice = {key: n for key, n in keys.items() if n > 1}
    assert not twice, f"step requests sent more than once: {twice}"
    events = timelines(world.engine)
    parked: Counter[str] = Counter()
    for case_id, status in final.items():
        sent = by_case.get(str(case_id), [])
        if status == CaseStatus.CLOSED:
            assert len(sent) == 1, (case_id, sent)
            assert events[case_id] == CLOSED_LIFE, (case_id, events[case_id])
        else:
            assert len(sent) <= 1, (case_id, sent)
            life = events[case_id]
            assert life[:5] == CLOSED_LIFE[:5], (case_id, life)
            assert life[-1] in ("exec_failed", "verify_failed"), (case_id, life)
            parked[park_reason(world.engine, case_id)[:90]] += 1
    # Without Slack (none is configured here) the notifier's posts are held, never sent nor
    # given up on: held letters are not dead ones.
    letters = inbox.dead_letters(world.engine)
    held = [row for row in letters if str(row["error"]).startswith(HELD)]
    assert all(row["consumer"] == "notifier" for row in held), held
    dead = [row for row in letters if row not in held]
    if chaos:
        check_interrupted_posts(dead, world)
    else:
        assert dead == []
    return {"statuses": dict(counted), "requests": sum(keys.values()), "dead_letters": len(dead),
            "parked": dict(parked)}


def check_interrupted_posts(dead: list[Any], world: World) -> None:
    """The only dead letters a kill may leave: chat posts it interrupted. The notifier does not
    post again blind (the post may have happened), so the gateway keeps the call in progress
    and then for reconciliation, and the message waits for an operator in the dead letters."""
    for row in dead:
        assert row["consumer"] == "notifier", row
        assert "in_progress" in row["error"] or "needs_reconciliation" in row["error"], row
    consumer_kills = sum(process.kills for process in world.consumers)
    assert len(dead) <= 2 * consumer_kills, (dead, consumer_kills)  # 2 notifier readers each


def stop_cleanly(world: World) -> None:
    world.wait_up()
    for process in world.processes:
        assert process.terminate() == 0, process.output()[-2000:]
    assert "relay: stopped after publishing" in world.relay.output()
    for process in world.consumers:
        assert "consume: stopped (intake" in process.output()


# -- the runs --------------------------------------------------------------------------------


def test_200_cases_run_their_whole_life_through_relay_and_consumer_processes(world: World):
    started = time.monotonic()
    case_ids = world.open_cases(world.cases)
    wait_until(lambda: all_final(world.engine, case_ids), RUN_DEADLINE_S,
               "for every case to end")
    elapsed = time.monotonic() - started
    summary = check_the_run(world, case_ids, chaos=False)
    assert summary["requests"] == world.cases
    stop_cleanly(world)
    print(f"\n{world.cases} cases CLOSED in {elapsed:.1f}s; {summary}")


@pytest.mark.chaos
def test_kill_9_of_relay_and_consumers_mid_run_keeps_every_step_exactly_once(
        world: World, nats_server: NatsServer | None, request: pytest.FixtureRequest):
    """A seeded schedule of kill -9: the relay, a consume process, then any of them (and, on
    JetStream, the nats-server, started again on its store), each at a random moment and
    started again after a random pause. The seed is printed; ``--chaos-seed SEED`` replays
    the same schedule."""
    seed = request.config.getoption("chaos_seed") or int(time.time())
    rng = random.Random(seed)
    seed_note = f"chaos seed {seed} (replay: pytest --chaos-seed {seed} {request.node.nodeid})"
    kills: list[str] = []
    case_ids: list[UUID] = []
    victims: list[tuple[str, Process | NatsServer]] = [
        (process.name, process) for process in world.processes]
    if nats_server is not None:
        victims.append(("nats-server", nats_server))
    # Relay first, then a consumer, then whichever: drawn before the run, so a seed is a
    # schedule whatever the machine's speed.
    order = victims[:2] + [rng.choice(victims) for _ in range(6)]
    waits = [(rng.uniform(0.5, 2.5), rng.uniform(0.1, 1.0)) for _ in order]
    print(f"\n{seed_note}: {[name for name, _victim in order]}")

    def chaos() -> None:
        # Each killed at its moment and started again after its pause, until every case ended
        # or the schedule is spent.
        for (name, victim), (before_s, pause_s) in zip(order, waits, strict=True):
            # The relay's and a consumer's kills always come; after them, none once every
            # case ended.
            if world.stop.wait(before_s) or (
                    len(kills) >= 2 and case_ids and all_final(world.engine, case_ids)):
                return
            victim.kill9()
            kills.append(name)
            world.stop.wait(pause_s)
            victim.start()

    killer = threading.Thread(target=chaos, daemon=True)
    killer.start()
    started = time.monotonic()
    case_ids.extend(world.open_cases(world.cases))
    # A fast run (JetStream's, seen once) may end every case before the consumer's kill: keep
    # a few cases coming until the relay and a consumer have both been killed with work in
    # flight, so both kills land mid-run.
    feeding_until = time.monotonic() + RUN_DEADLINE_S
    while len(kills) < 2 and killer.is_alive() and time.monotonic() < feeding_until:
        if all_final(world.engine, case_ids):
            case_ids.extend(world.open_cases(FEED))
        world.stop.wait(0.5)
    wait_until(lambda: all_final(world.engine, case_ids), RUN_DEADLINE_S,
               f"for every case to end ({seed_note}, kills {kills})")
    killer.join(15)
    elapsed = time.monotonic() - started
    for process in world.processes:
        if not process.alive:
            process.start()
    summary = check_the_run(world, case_ids, chaos=True)
    assert {"relay", "consume-1"} <= set(kills), kills
    stop_cleanly(world)
    print(f"\n{len(case_ids)} cases ended in {elapsed:.1f}s with kills {kills} ({seed_note}); "
          f"{summary}")


@pytest.mark.chaos
@pytest.mark.parametrize("nats_server", ["jetstream"], indirect=True)
def test_kill_9_of_nats_server_and_a_consumer_frozen_past_ack_wait_lose_and_repeat_nothing(
        world: World, nats_server: NatsServer):
    """JetStream's own faults: a consume process frozen (SIGSTOP) past AckWait while it holds
    messages (the other process is handed them again, and says so), then thawed; nats-server
    killed with -9 mid-run and started again on the same store (twice): every case ends, none
    is stuck, no step runs twice."""
    events: list[str] = []
    case_ids: list[UUID] = []
    frozen, other = world.consumers
    topics_of = {consumer.name: consumer.topics for consumer in build_consumers(world.app)}

    # A consume process frozen past AckWait: if it held messages, after AckWait the server
    # hands them to the other process, which says so. A frozen process's pull requests outlive
    # the freeze by a second at most, so it may hold nothing (on a loaded machine, 5 batches in
    # a row): then it is thawed once every case of the batch ended and nothing is
    # unacknowledged, and frozen again for the next batch. That a held message goes to the
    # other reader after AckWait, once, is shown deterministically by tests/integration/messaging/
    # test_jetstream.py::test_a_message_held_by_a_frozen_reader_goes_to_another_after_ack_wait…;
    # here the freeze must cost no case and repeat no step.
    for _batch in range(FREEZE_BATCHES):
        frozen.freeze()
        events.append("consume-1 frozen")
        batch = world.open_cases(4)
        case_ids.extend(batch)
        wait_until(lambda batch=batch: REDELIVERED in other.output() or (
            all_final(world.engine, batch) and pending_entries(world, topics_of) == 0),
            RUN_DEADLINE_S, f"for consume-2 to be handed consume-1's messages ({events})")
        frozen.thaw()
        events.append("consume-1 thawed")
        if REDELIVERED in other.output():
            break
    events.append("its messages delivered again to consume-2" if REDELIVERED in other.output()
                  else "consume-1 held nothing while frozen")

    def faults() -> None:
        for _round in range(2):
            if world.stop.wait(1.0) or all_final(world.engine, case_ids):
                return
            nats_server.kill9()
            events.append("nats-server kill -9")
            world.stop.wait(0.5)
            nats_server.start()
            events.append("nats-server restarted on its store")

    started = time.monotonic()
    opened = world.open_cases(world.cases)
    faulter = threading.Thread(target=faults, daemon=True)
    faulter.start()
    case_ids.extend(opened)
    wait_until(lambda: all_final(world.engine, case_ids), RUN_DEADLINE_S,
               f"for every case to end (faults {events})")
    faulter.join(30)
    elapsed = time.monotonic() - started
    summary = check_the_run(world, case_ids, chaos=True)
    stuck = sum(1 for status in statuses(world.engine, case_ids).values()
                if status not in FINAL)
    keys, _by_case = requests_by_case(world.server)
    duplicates = sum(n - 1 for n in keys.values() if n > 1)
    assert stuck == 0 and duplicates == 0
    stop_cleanly(world)
    print(f"\nJetStream faults {events}: {len(case_ids)} cases driven, "
          f"{sum(summary['statuses'].values())} ended in {elapsed:.1f}s, stuck {stuck}, "
          f"duplicate side effects {duplicates}; {summary}")


def moving(engine: Engine, case_ids: list[UUID]) -> bool:
    """Some case has left NEW and some has not ended: the loop is mid-flight."""
    now = statuses(engine, case_ids).values()
    return any(status != CaseStatus.NEW for status in now) and not all(
        status in FINAL for status in now)


@pytest.mark.chaos
@pytest.mark.parametrize("nats_server", ["jetstream"], indirect=True)
@pytest.mark.parametrize("bus_knobs", [{"OPSGATE_DELIVERY_BOUND_S": "3"}], indirect=True)
def test_nats_restarted_on_an_empty_store_mid_run_costs_no_case_and_no_restart_by_hand(
        world: World, nats_server: NatsServer):
    """A lost volume: nats-server killed mid-run and started again on the same port with no
    store (every stream, durable consumer and message gone). Nobody restarts relay or consume:
    the relay creates the streams again as it publishes, each reader finds its durable
    consumer gone and creates it again, and the messages the server lost are sent again by the
    relay's delivery watchdog (bound 3 s here). Every case ends CLOSED, no step runs twice."""
    started = time.monotonic()
    case_ids = world.open_cases(world.cases)
    wait_until(lambda: moving(world.engine, case_ids), RUN_DEADLINE_S, "for the loop to move")
    nats_server.restart_empty()
    samples = Samples(world)
    sampler = threading.Thread(target=samples.take_until_done, args=(case_ids,), daemon=True)
    sampler.start()
    wait_until(lambda: all_final(world.engine, case_ids), RUN_DEADLINE_S,
               "for every case to end after the store was lost")
    sampler.join(30)
    elapsed = time.monotonic() - started
    summary = check_the_run(world, case_ids, chaos=True)
    assert summary["statuses"] == {CaseStatus.CLOSED: world.cases}, summary
    assert not [process.name for process in world.processes if process.kills], "restarted"
    # /readyz's bus check never says ok while it lists a missing durable consumer, and the
    # gap shows: not ready at least once while cases waited.
    assert not [check for check in samples.bus if check["ok"] and any(
        "missing" in state for state in check.get("consumers", {}).values())], samples.bus
    assert "not_ready" in samples.ready, samples.ready
    # Reconcile named what had waited past the bound until recorded, then nothing.
    assert Reconciler(world.engine, outbox_bound_s=60, delivery_bound_s=3).undelivered(
        datetime.now(UTC), repair=False) == []
    stop_cleanly(world)
    healed = sum(process.output().count("creating it again") for process in world.consumers)
    print(f"\nNATS lost its store mid-run: {world.cases} cases CLOSED in {elapsed:.1f}s, "
          f"{healed} durable consumers created again by the readers; /readyz sampled "
          f"{Counter(samples.ready)}, reconcile named up to {samples.most_undelivered} "
          f"undelivered message(s); {summary}")


class Samples:
    """``/readyz`` (in-process, the test's app) and reconcile's undelivered messages, every
    half second from the loss until every case ended."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ready: list[str] = []
        self.bus: list[dict[str, Any]] = []
        self.most_undelivered = 0

    def take_until_done(self, case_ids: list[UUID]) -> None:
        reconciler = Reconciler(self.world.engine, outbox_bound_s=60, delivery_bound_s=3)
        while not all_final(self.world.engine, case_ids) and not self.world.stop.is_set():
            answer = readiness(self.world.app)
            self.ready.append(answer["status"])
            self.bus.append(answer["checks"]["bus"])
            named = reconciler.undelivered(datetime.now(UTC), repair=False)
            self.most_undelivered = max(self.most_undelivered, len(named))
            time.sleep(0.5)


# -- a three-node JetStream cluster ------------------------------------------------------------


def stream_leader(world: World, topic: str) -> str:
    assert world.jetstream is not None
    info = world.jetstream._call(world.jetstream.js.stream_info(
        world.jetstream.config.stream(topic)), 5)
    assert info.config.num_replicas == 3 and info.cluster is not None
    return str(info.cluster.leader)


def check_no_duplicates(world: World, case_ids: list[UUID]) -> dict[str, Any]:
    summary = check_the_run(world, case_ids, chaos=True)
    assert summary["statuses"] == {CaseStatus.CLOSED: len(case_ids)}, summary
    keys, _by_case = requests_by_case(world.server)
    assert sum(keys.values()) == len(case_ids) and max(keys.values()) == 1
    return summary


@pytest.mark.chaos
@pytest.mark.parametrize("nats_server", ["cluster"], indirect=True)
def test_a_three_node_cluster_loses_a_stream_leader_mid_run_and_every_case_closes_once(
        world: World, nats_server: NatsCluster):
    """OPSGATE_BUS_URL names three nats-servers (one per node, comma-separated) and every
    stream has three replicas. The leader of the executor's stream is killed -9 mid-run and
    stays down: the others elect a new leader, the clients reconnect to them, and every case
    ends CLOSED with each step's request sent once."""
    assert "(3 replica(s)) at " + nats_server.url in world.relay.output()
    started = time.monotonic()
    case_ids = world.open_cases(world.cases)
    wait_until(lambda: moving(world.engine, case_ids), RUN_DEADLINE_S, "for the loop to move")
    leader = stream_leader(world, Topic.EXEC_RUN)
    nats_server.node(leader).kill9()
    wait_until(lambda: all_final(world.engine, case_ids), RUN_DEADLINE_S,
               f"for every case to end with stream leader {leader} killed")
    elapsed = time.monotonic() - started
    summary = check_no_duplicates(world, case_ids)
    new_leader = stream_leader(world, Topic.EXEC_RUN)
    assert new_leader != leader
    stop_cleanly(world)
    print(f"\ncluster, leader {leader} of {Topic.EXEC_RUN} killed mid-run (now {new_leader}): "
          f"{len(case_ids)} cases CLOSED in {elapsed:.1f}s, 0 duplicates; {summary}")


@pytest.mark.chaos
@pytest.mark.parametrize("nats_server", ["cluster"], indirect=True)
def test_a_cluster_without_quorum_holds_the_outbox_and_resumes_when_quorum_returns(
        world: World, nats_server: NatsCluster):
    """Two of three nodes killed -9: no stream can store a message, so the relay publishes
    nothing and its rows wait in the outbox (no case leaves NEW). The two come back on their
    stores: the relay publishes what waited and every case closes, each step once."""
    down = nats_server.nodes[1:]
    for node in down:
        node.kill9()
    case_ids = world.open_cases(8)
    time.sleep(8)  # long enough for a relay to have published, had it a quorum
    assert set(statuses(world.engine, case_ids).values()) == {CaseStatus.NEW}
    held = unpublished(world.engine)
    assert held >= len(case_ids)
    for node in down:
        node.start()
    started = time.monotonic()
    wait_until(lambda: all_final(world.engine, case_ids), RUN_DEADLINE_S,
               "for every case to end once quorum returned")
    elapsed = time.monotonic() - started
    summary = check_no_duplicates(world, case_ids)
    stop_cleanly(world)
    print(f"\ncluster without quorum: {held} outbox rows held; quorum back, "
          f"{len(case_ids)} cases CLOSED in {elapsed:.1f}s, 0 duplicates; {summary}")
