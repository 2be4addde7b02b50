"""Benchmark: the outbox relay (PostgreSQL -> Redis Streams) beside a raw XADD/XREADGROUP loop,
and the relay onto NATS JetStream beside raw JetStream publishing, in one run on 127.0.0.1.

Throughput: N committed outbox rows drained by ``OutboxRelay`` onto a stream, against N entries
XADDed in pipelines of the same batch size; the same XREADGROUP/XACK reader consumes both, and a
run ends when it has read every message. Latency: one outbox row committed per transaction at a
steady rate (default 500/s) with the relay running (LISTEN/NOTIFY, as in production); the time
from each commit returning to the reader holding the message, beside a raw XADD at the same rate.
Targets (issue 4): relay >= 50% of the raw throughput; p99 commit-to-consumer < 50 ms at 500/s.
The database's share (issue 43): the same relay onto a bus that holds nothing (``HoldsNothing``)
drains the same rows; the relay can go no faster than that, so ``ratio_ceiling`` = database-only
/ raw is the most its ratio can be, whatever its publishing costs. A batch is published between
its claim and its commit (a failed publish rolls the marks back); were the next claim to wait
for that publish, a batch would cost the database's time plus the publish's: ``serial_ratio`` =
database-only / (database-only + raw) is what that serial shape gives, and what the relay's
overlap of a publish with the next claim gains on.

JetStream (issue 25, ``--bus jetstream`` or ``both``, a ``nats-server -js`` at ``--nats-url``):
the same two measurements. Raw is ``publish`` of batches of the same size waiting for the
server's acknowledgments (what the relay does after its claim, without the database); the reader
of both is a durable pull consumer fetching and acknowledging each message, as opsgate's
readers do (without their inbox). Figures last, as one line of JSON; JetStream's under
``"jetstream"``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Self

import redis
from sqlalchemy import Engine, insert

from core.db.tables import outbox
from core.errors import Unavailable
from core.messaging.bus import Bus, RedisStreamsBus
from core.messaging.envelope import Envelope
from core.messaging.jetstream.bus import JetStreamBus
from core.messaging.jetstream.config import JetStreamConfig
from core.messaging.jetstream.wire import decode
from core.messaging.relay import OutboxRelay
from core.migrate import scratch_schema

REDIS_URL = "redis://127.0.0.1:6379/0"
NATS_URL = "nats://127.0.0.1:4222"
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TOPIC = "bench.outbox.v1"
GROUP = "bench"
THROUGHPUT_TARGET, P99_TARGET_MS = 0.5, 50.0


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- the places: a fresh schema and a fresh stream prefix ------------------------------------


@contextmanager
def fresh_prefix(client: redis.Redis) -> Iterator[str]:
    prefix = f"bench:{uuid.uuid4().hex[:10]}:"
    try:
        yield prefix
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*", count=500))
        if keys:
            client.delete(*keys)


# -- the reader both contenders share ----------------------------------------------------------


class Running:
    """What both readers share: read on a thread of their own while the caller measures."""

    stop: threading.Event
    expect: int

    def run(self) -> None:
        raise NotImplementedError

    @contextmanager
    def running(self, expect: int = 0) -> Iterator[Self]:
        self.expect = expect
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            thread.join(10)


@dataclass
class Reader(Running):
    """XREADGROUP + XACK on one stream, noting when each message arrived."""

    client: redis.Redis
    stream: str
    arrived: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.client.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        self.done = threading.Event()
        self.expect = 0

    def run(self) -> None:
        while not self.stop.is_set():
            reply: Any = self.client.xreadgroup(GROUP, "reader", {self.stream: ">"}, count=500,
                                                block=100)
            for _stream, entries in reply or []:
                now = time.perf_counter()
                ids = []
                for entry_id, fields in entries:
                    self.arrived[int(fields[b"message_id"])] = now
                    ids.append(entry_id)
                self.client.xack(self.stream, GROUP, *ids)
            if self.expect and len(self.arrived) >= self.expect:
                self.done.set()



def fields(message_id: int) -> dict[str, str]:
    return Envelope(message_id, TOPIC, f"case-{message_id % 97}",
                    {"case_id": f"case-{message_id % 97}", "version": 1}).to_fields()


# -- throughput --------------------------------------------------------------------------------


def throughputs(engine: Engine, client: redis.Redis, prefix: str, n: int, batch: int,
                rounds: int) -> tuple[float, float, float]:
    """(relay, raw, database-only) messages/s over ``n`` messages each, the three interleaved in
    ``rounds`` slices so that load from elsewhere on the machine falls on all alike."""
    relay_s = raw_s = db_s = 0.0
    share = max(1, n // rounds)
    for round_ in range(rounds):
        raw_s += share / raw_throughput(client, f"{prefix}{round_}:", share, batch)
        relay_s += share / relay_throughput(engine, client, f"{prefix}{round_}:", share, batch)
        db_s += share / database_throughput(engine, share, batch)
    total = share * rounds
    return total / relay_s, total / raw_s, total / db_s


class HoldsNothing:
    """A bus that takes every envelope and keeps none: the relay's own (database) work alone."""

    def publish(self, envelopes: Sequence[Envelope]) -> None:
        return None


def database_throughput(engine: Engine, n: int, batch: int) -> float:
    """The relay's claim, mark and commit of ``n`` rows, publishing to no bus."""
    bus: Bus = HoldsNothing()
    with engine.begin() as conn:
        conn.execute(insert(outbox), outbox_rows(n))
    started = time.perf_counter()
    OutboxRelay(engine, bus, batch_size=batch).drain()
    return n / (time.perf_counter() - started)


def outbox_rows(n: int) -> list[dict[str, Any]]:
    return [{"topic": TOPIC, "key": f"case-{i % 97}",
             "payload": {"case_id": f"case-{i % 97}", "version": 1}} for i in range(n)]


def relay_throughput(engine: Engine, client: redis.Redis, prefix: str, n: int,
                     batch: int) -> float:
    bus = RedisStreamsBus(client, prefix=prefix)
    with engine.begin() as conn:
        conn.execute(insert(outbox), outbox_rows(n))
    relay = OutboxRelay(engine, bus, batch_size=batch)
    with Reader(client, bus.stream(TOPIC)).running(expect=n) as reader:
        started = time.perf_counter()
        relay.drain()
        if not reader.done.wait(120):
            raise RuntimeError(f"the reader got {len(reader.arrived)} of {n} messages")
        return n / (max(reader.arrived.values()) - started)


def raw_throughput(client: redis.Redis, prefix: str, n: int, batch: int) -> float:
    stream = f"{prefix}raw-throughput"
    with Reader(client, stream).running(expect=n) as reader:
        started = time.perf_counter()
        for first in range(0, n, batch):
            pipe = client.pipeline(transaction=False)
            for i in range(first, min(first + batch, n)):
                pipe.xadd(stream, fields(i), maxlen=1_000_000, approximate=True)  # type: ignore[arg-type]
            pipe.execute()
        if not reader.done.wait(120):
            raise RuntimeError(f"the reader got {len(reader.arrived)} of {n} messages")
        return n / (max(reader.arrived.values()) - started)


# -- latency at a steady rate ------------------------------------------------------------------


def paced(rate: float, seconds: float, send: Callable[[int], int]) -> dict[int, float]:
    """Call ``send(i)`` at ``rate`` per second for ``seconds``; returns message id -> the moment
    the send returned (the commit, for the relay)."""
    sent: dict[int, float] = {}
    start, count = time.perf_counter(), int(rate * seconds)
    for i in range(count):
        due = start + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        message_id = send(i)
        sent[message_id] = time.perf_counter()
    return sent


def latencies_ms(sent: dict[int, float], reader: Reader | JetStreamReaderBench,
                 grace_s: float = 10) -> list[float]:
    deadline = time.monotonic() + grace_s
    while len(reader.arrived) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.01)
    missing = len(sent) - len(reader.arrived)
    if missing:
        raise RuntimeError(f"{missing} messages never reached the reader")
    return [(reader.arrived[i] - sent[i]) * 1000 for i in sent]


def relay_latency(engine: Engine, client: redis.Redis, prefix: str, rate: float,
                  seconds: float, poll_s: float) -> list[float]:
    bus = RedisStreamsBus(client, prefix=prefix)
    relay, stop = OutboxRelay(engine, bus, poll_s=poll_s), threading.Event()
    relay_thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    relay_thread.start()
    time.sleep(0.5)  # let it LISTEN

    def commit(i: int) -> int:
        with engine.begin() as conn:
            row = conn.execute(insert(outbox).values(
                topic=TOPIC, key=f"case-{i % 97}", payload={"case_id": f"case-{i % 97}"},
            ).returning(outbox.c.id)).scalar_one()
        return int(row)

    try:
        with Reader(client, bus.stream(TOPIC)).running() as reader:
            return latencies_ms(paced(rate, seconds, commit), reader)
    finally:
        stop.set()
        relay_thread.join(10)


def raw_latency(client: redis.Redis, prefix: str, rate: float, seconds: float) -> list[float]:
    stream = f"{prefix}raw-latency"

    def xadd(i: int) -> int:
        client.xadd(stream, fields(i))  # type: ignore[arg-type]
        return i

    with Reader(client, stream).running() as reader:
        return latencies_ms(paced(rate, seconds, xadd), reader)


# -- JetStream ---------------------------------------------------------------------------------


@contextmanager
def jetstream(url: str) -> Iterator[JetStreamBus]:
    """A bus on streams of a fresh prefix (removed after), acknowledged within 30 s."""
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    bus = JetStreamBus(JetStreamConfig((url,), prefix=prefix, ack_wait_s=30.0),
                       name="bench").connect()
    try:
        yield bus
    finally:
        for name in sorted(bus._streams):
            try:
                bus._call(bus.js.delete_stream(name), 10)
            except Unavailable as exc:
                say(f"could not remove stream {name}: {exc}")
        bus.close()


@dataclass
class JetStreamReaderBench(Running):
    """A durable pull consumer on one topic's stream: fetch, note, acknowledge each."""

    bus: JetStreamBus
    topic: str
    arrived: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.subscription = self.bus.subscribe("bench", self.topic)
        self.done = threading.Event()
        self.expect = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                msgs = self.bus.fetch(self.subscription, 500, 0.1)
            except Unavailable as exc:  # a slow moment on a loaded machine: fetch again
                say(f"JetStream reader: {exc}; fetching again")
                continue
            now = time.perf_counter()
            for msg in msgs:
                self.arrived[decode(msg.data).message_id] = now
                self.bus.ack(msg)
            if self.expect and len(self.arrived) >= self.expect:
                self.done.set()



def envelope(message_id: int, topic: str) -> Envelope:
    return Envelope(message_id, topic, f"case-{message_id % 97}",
                    {"case_id": f"case-{message_id % 97}", "version": 1}, 1)


def js_throughputs(engine: Engine, bus: JetStreamBus, n: int, batch: int,
                   rounds: int) -> tuple[float, float]:
    """(relay, raw) messages/s onto JetStream, interleaved as ``throughputs``."""
    relay_s = raw_s = 0.0
    share = max(1, n // rounds)
    for round_ in range(rounds):
        raw_s += share / js_raw_throughput(bus, f"bench.raw{round_}", share, batch)
        relay_s += share / js_relay_throughput(engine, bus, f"bench.relay{round_}", share, batch)
    total = share * rounds
    return total / relay_s, total / raw_s


def js_relay_throughput(engine: Engine, bus: JetStreamBus, topic: str, n: int,
                        batch: int) -> float:
    rows = [{"topic": topic, "key": f"case-{i % 97}", "payload": {"case_id": f"case-{i % 97}",
                                                                   "version": 1}}
            for i in range(n)]
    with engine.begin() as conn:
        conn.execute(insert(outbox), rows)
    relay = OutboxRelay(engine, bus, batch_size=batch)
    with JetStreamReaderBench(bus, topic).running(expect=n) as reader:
        started = time.perf_counter()
        relay.drain()
        if not reader.done.wait(120):
            raise RuntimeError(f"the reader got {len(reader.arrived)} of {n} messages")
        return n / (max(reader.arrived.values()) - started)


def js_raw_throughput(bus: JetStreamBus, topic: str, n: int, batch: int) -> float:
    with JetStreamReaderBench(bus, topic).running(expect=n) as reader:
        started = time.perf_counter()
        for first in range(0, n, batch):
            bus.publish([envelope(i, topic) for i in range(first, min(first + batch, n))])
        if not reader.done.wait(120):
            raise RuntimeError(f"the reader got {len(reader.arrived)} of {n} messages")
        return n / (max(reader.arrived.values()) - started)


def js_relay_latency(engine: Engine, bus: JetStreamBus, rate: float, seconds: float,
                     poll_s: float) -> list[float]:
    topic = "bench.relay-latency"
    relay, stop = OutboxRelay(engine, bus, poll_s=poll_s), threading.Event()
    with JetStreamReaderBench(bus, topic).running() as reader:
        relay_thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
        relay_thread.start()
        time.sleep(0.5)  # let it LISTEN

        def commit(i: int) -> int:
            with engine.begin() as conn:
                row = conn.execute(insert(outbox).values(
                    topic=topic, key=f"case-{i % 97}", payload={"case_id": f"case-{i % 97}"},
                ).returning(outbox.c.id)).scalar_one()
            return int(row)

        try:
            return latencies_ms(paced(rate, seconds, commit), reader)
        finally:
            stop.set()
            relay_thread.join(10)


def js_raw_latency(bus: JetStreamBus, rate: float, seconds: float) -> list[float]:
    topic = "bench.raw-latency"

    def publish(i: int) -> int:
        bus.publish([envelope(i, topic)])
        return i

    with JetStreamReaderBench(bus, topic).running() as reader:
        return latencies_ms(paced(rate, seconds, publish), reader)


# -- the run -----------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


SHORT: dict[str, Any] = {"messages": 500, "rounds": 1, "seconds": 1.0, "rate": 200.0}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--messages", type=int, default=20_000,
                        help="messages per throughput run (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=200,
                        help="relay batch size = raw XADD pipeline size (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved relay/raw slices of the throughput runs "
                             "(default: %(default)s)")
    parser.add_argument("--rate", type=float, default=500.0,
                        help="messages/s of the latency runs (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="duration of each latency run (default: %(default)s)")
    parser.add_argument("--poll-s", type=float, default=1.0,
                        help="the relay's polling floor in the latency run (default: "
                             "%(default)s; NOTIFY wakes it sooner)")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--redis-url", default=REDIS_URL)
    parser.add_argument("--nats-url", default=NATS_URL,
                        help="a nats-server -js for --bus jetstream/both (default: %(default)s)")
    parser.add_argument("--bus", choices=("redis", "jetstream", "both"), default="both",
                        help="which bus to measure (default: %(default)s, in one run)")
    parser.add_argument("--short", action="store_true",
                        help=f"seconds and small sizes: {SHORT}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    if not (1 <= args.messages <= 1_000_000 and 1 <= args.rounds <= 100
            and 0 < args.seconds <= 300 and 0 < args.rate <= 20_000):
        parser.error("keep it bounded: 1..1,000,000 messages, 1..100 rounds, at most 300 s "
                     "and 20,000 messages/s per latency run")

    figures: dict[str, Any] = {"messages": args.messages, "batch": args.batch,
                               "rounds": args.rounds, "rate_per_s": args.rate}
    rows: list[tuple[str, dict[str, Any]]] = []
    if args.bus in ("redis", "both"):
        redis_figures = measure_redis(args)
        figures.update(redis_figures)
        rows.append(("Redis Streams", redis_figures))
    if args.bus in ("jetstream", "both"):
        try:
            js_figures = measure_jetstream(args)
        except Unavailable as exc:
            say(f"JetStream: {exc.message}")
            return 1
        figures["jetstream"] = js_figures
        rows.append(("JetStream", js_figures))

    print(f"{'path':<46} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for bus, got in rows:
        print(f"{bus + ' relay: outbox -> bus -> reader':<46} {got['relay_msgs_per_s']:>9} "
              f"{got['p50_ms']:>8} {got['p99_ms']:>8}")
        print(f"{bus + ' raw: publish -> reader':<46} {got['raw_msgs_per_s']:>9} "
              f"{got['raw_p50_ms']:>8} {got['raw_p99_ms']:>8}")
    for bus, got in rows:
        print(f"{bus}: throughput ratio {got['throughput_ratio']:.2f} (target >= "
              f"{THROUGHPUT_TARGET}); p99 {got['p99_ms']:.1f} ms at {args.rate:g}/s (target < "
              f"{P99_TARGET_MS:g} ms)")
        if "ratio_ceiling" in got:
            print(f"{bus}: the relay's database work alone {got['database_only_msgs_per_s']} "
                  f"msgs/s: the ratio can be at most {got['ratio_ceiling']:.2f}; a relay "
                  f"whose next claim waited for each publish would get {got['serial_ratio']:.2f}")
    print(json.dumps(figures, sort_keys=True), flush=True)
    return 0


def measure_redis(args: argparse.Namespace) -> dict[str, Any]:
    client = redis.Redis.from_url(args.redis_url, socket_timeout=10)
    with scratch_schema(args.postgres_url) as engine, fresh_prefix(client) as prefix:
        say(f"Redis Streams throughput: {args.messages} messages each, batches of "
            f"{args.batch}, {args.rounds} interleaved rounds")
        relay_tp, raw_tp, db_tp = throughputs(engine, client, prefix, args.messages,
                                              args.batch, args.rounds)
        say(f"Redis Streams latency: {args.rate:g} messages/s for {args.seconds:g} s each")
        raw_lat = raw_latency(client, prefix + "l:", args.rate, args.seconds)
        relay_lat = relay_latency(engine, client, prefix + "l:", args.rate, args.seconds,
                                  args.poll_s)
    client.close()
    return {**figures_of(relay_tp, raw_tp, relay_lat, raw_lat),
            "database_only_msgs_per_s": round(db_tp),
            "ratio_ceiling": round(db_tp / raw_tp, 3),
            "serial_ratio": round(db_tp / (db_tp + raw_tp), 3)}


def measure_jetstream(args: argparse.Namespace) -> dict[str, Any]:
    with scratch_schema(args.postgres_url) as engine, jetstream(args.nats_url) as bus:
        say(f"JetStream throughput: {args.messages} messages each, batches of {args.batch}, "
            f"{args.rounds} interleaved rounds")
        relay_tp, raw_tp = js_throughputs(engine, bus, args.messages, args.batch, args.rounds)
        say(f"JetStream latency: {args.rate:g} messages/s for {args.seconds:g} s each")
        raw_lat = js_raw_latency(bus, args.rate, args.seconds)
        relay_lat = js_relay_latency(engine, bus, args.rate, args.seconds, args.poll_s)
    return figures_of(relay_tp, raw_tp, relay_lat, raw_lat)


def figures_of(relay_tp: float, raw_tp: float, relay_lat: list[float],
               raw_lat: list[float]) -> dict[str, Any]:
    ratio = relay_tp / raw_tp
    p99 = percentile(relay_lat, 0.99)
    return {
        "latency_messages": len(relay_lat),
        "relay_msgs_per_s": round(relay_tp), "raw_msgs_per_s": round(raw_tp),
        "throughput_ratio": round(ratio, 3), "throughput_target_met": ratio >= THROUGHPUT_TARGET,
        "p50_ms": round(statistics.median(relay_lat), 2), "p99_ms": round(p99, 2),
        "max_ms": round(max(relay_lat), 2), "latency_target_met": p99 < P99_TARGET_MS,
        "raw_p50_ms": round(statistics.median(raw_lat), 2),
        "raw_p99_ms": round(percentile(raw_lat, 0.99), 2),
    }


if __name__ == "__main__":
    sys.exit(main())
