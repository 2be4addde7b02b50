"""The loop's production processes on PostgreSQL and Redis Streams or NATS JetStream: ``opsgate
relay``, ``opsgate consume``, and ``opsgate outbox dead`` for the messages consumers gave up on."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from core.cli.app import opened_app, settings_of
from core.cli.command import CliError, Command, database_option, shown

if TYPE_CHECKING:
    from core.bootstrap import App
    from core.messaging.bus import RedisStreamsBus
    from core.messaging.envelope import Envelope
    from core.messaging.jetstream.bus import JetStreamBus
    from core.settings import Settings


def connected_streams(settings: Settings) -> RedisStreamsBus:
    """The Redis Streams bus of ``settings``, once Redis answers; close its ``client``."""
    import redis

    from core.loop_processes import stream_bus, streams_client

    assert settings.redis_url is not None
    client = streams_client(settings.redis_url)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise CliError(f"Redis at {shown(settings.redis_url)} is not reachable: {exc}") from exc
    return stream_bus(settings, client)


def connected_jetstream(settings: Settings, what: str) -> JetStreamBus:
    """The JetStream bus of ``settings``, once the server answers with JetStream and the streams
    (those of ``what`` needs) have the settings opsgate needs; ``close()`` it."""
    from core.errors import Unavailable
    from core.loop_processes import jetstream_bus
    from core.messaging.jetstream.config import JetStreamSetupError

    try:
        return jetstream_bus(settings, what)
    except (Unavailable, JetStreamSetupError) as exc:
        raise CliError(exc.message) from exc


def connected_bus(settings: Settings, what: str) -> RedisStreamsBus | JetStreamBus:
    """The bus between the processes: JetStream when OPSGATE_BUS_URL is set, else Redis
    Streams; close it with ``close_bus``."""
    if settings.bus_kind == "jetstream":
        return connected_jetstream(settings, what)
    return connected_streams(settings)


def close_bus(bus: RedisStreamsBus | JetStreamBus) -> None:
    from core.messaging.jetstream.bus import JetStreamBus

    if isinstance(bus, JetStreamBus):
        bus.close()
    else:
        bus.client.close()


def bus_line(settings: Settings) -> str:
    """Where the messages go, as a start line says it (every server of a cluster, without
    credentials)."""
    if settings.bus_kind == "jetstream":
        from core.messaging.jetstream.config import JetStreamConfig

        config = JetStreamConfig.of(settings)
        return (f"JetStream streams {settings.jetstream_prefix}_<topic> ({config.replicas} "
                f"replica(s)) at {config.shown}")
    return f"Redis streams {settings.stream_prefix}<topic> at {shown(str(settings.redis_url))}"


@contextmanager
def _process_app(args: argparse.Namespace, what: str) -> Iterator[App]:
    """The app of a relay or consume process: needs a bus between processes (JetStream or
    Redis Streams) and a schema at head."""
    settings = settings_of(args)
    if settings.bus_kind == "in-process":
        raise CliError(f"{what} needs OPSGATE_BUS_URL (NATS JetStream) or OPSGATE_REDIS_URL "
                       "(Redis Streams) to carry the messages between processes; without "
                       "either the loop runs in-process inside `opsgate serve`")
    with opened_app(settings) as app:
        _serve_metrics(settings, what)
        yield app


def _serve_metrics(settings: Settings, what: str) -> None:
    """``/metrics`` of a relay or consume process on OPSGATE_METRICS_PORT, when it is set."""
    if settings.metrics_port is None:
        return
    from prometheus_client import start_http_server

    try:
        start_http_server(settings.metrics_port)
    except OSError as exc:
        raise CliError(f"cannot serve metrics on port {settings.metrics_port}: {exc}") from exc
    print(f"{what}: metrics on port {settings.metrics_port} (/metrics)", flush=True)


def _stopped_by_signals() -> threading.Event:
    from core.messaging.supervisor import stop_on_signals

    stop = threading.Event()
    stop_on_signals(stop)
    return stop


def loop_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress-s", type=float, default=10.0, metavar="SECONDS",
                        help="print a progress line this often when something moved "
                             "(default: %(default)s)")
    database_option(parser)


def run_relay(args: argparse.Namespace) -> int:
    from core.loop_processes import run_relay as relay
    from core.messaging.outbox import unpublished

    with _process_app(args, "relay") as app:
        settings, bus = app.settings, connected_bus(app.settings, "relay")
        if settings.bus_kind == "jetstream":
            _consumers_ready(bus)
        print(f"relay: database {shown(settings.database_url)} -> {bus_line(settings)}; "
              f"woken by NOTIFY, polling every {settings.relay_poll_s:g}s; "
              f"{unpublished(app.engine)} messages waiting", flush=True)
        try:
            published = relay(app, bus, _stopped_by_signals(), sys.stdout,
                              progress_every_s=args.progress_s)
        finally:
            close_bus(bus)
    print(f"relay: stopped after publishing {published} messages", flush=True)
    return 0


def _consumers_ready(bus: RedisStreamsBus | JetStreamBus) -> None:
    """JetStream: every stream and every consumer's durable consumer exists before the first
    publication, so no retention drops a message no consumer was there to take."""
    from core.consumers import subscriptions
    from core.errors import Unavailable
    from core.messaging.jetstream.bus import JetStreamBus
    from core.messaging.jetstream.config import JetStreamSetupError

    assert isinstance(bus, JetStreamBus)
    try:
        bus.ensure_consumers(subscriptions())
    except (Unavailable, JetStreamSetupError) as exc:
        bus.close()
        raise CliError(exc.message) from exc


def consume_arguments(parser: argparse.ArgumentParser) -> None:
    from core.consumers import CONSUMER_NAMES

    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"consumers to run (default: all of {', '.join(CONSUMER_NAMES)})")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="stream readers per consumer in this process (default: "
                             "%(default)s); more processes scale the same way")
    loop_arguments(parser)


def run_consume(args: argparse.Namespace) -> int:
    from core.consumers import build_consumers
    from core.loop_processes import ConsumerProcess, select_consumers

    if args.workers < 1:
        raise CliError("--workers must be at least 1")
    with _process_app(args, "consume") as app:
        try:
            consumers = select_consumers(build_consumers(app), args.names)
        except KeyError as unknown:
            raise CliError(str(unknown.args[0])) from unknown
        bus = connected_bus(app.settings, "consume")
        process = ConsumerProcess(app, bus, consumers, workers=args.workers)
        print(f"consume: {', '.join(c.name for c in consumers)} as {process.name} "
              f"({args.workers} reader(s) each) on {bus_line(app.settings)}", flush=True)
        try:
            process.run(_stopped_by_signals(), sys.stdout, progress_every_s=args.progress_s)
        finally:
            close_bus(bus)
    print(f"consume: stopped ({process.progress()})", flush=True)
    return 0


def outbox_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="outbox_command", metavar="ACTION", required=True)
    dead = actions.add_parser(
        "dead", help="list dead letters, or requeue one",
        description="List the messages consumers gave up on after their retries (dead "
                    "letters), newest last. --requeue ID delivers one again to its consumer: "
                    "its inbox entry is forgotten and its outbox row marked unpublished, so the "
                    "running relay (`opsgate relay`, or the loop inside `opsgate serve`) "
                    "publishes it again.")
    dead.add_argument("--requeue", type=int, metavar="ID",
                      help="the dead letter (the ID column) to deliver again")
    dead.add_argument("--all", action="store_true",
                      help="also list dead letters already requeued")
    database_option(dead)


def run_outbox(args: argparse.Namespace) -> int:
    with opened_app(settings_of(args)) as app:
        if args.requeue is not None:
            _requeue(app, args.requeue)
        else:
            _list_dead_letters(app, args.all)
    return 0


def _list_dead_letters(app: App, include_requeued: bool) -> None:
    from core.messaging import inbox

    rows = inbox.dead_letters(app.engine, include_requeued=include_requeued)
    if not rows:
        print("no dead letters", flush=True)
        return
    header = ("ID", "CONSUMER", "MESSAGE", "TOPIC", "CASE", "ATTEMPTS", "DIED", "REQUEUED",
              "ERROR")
    lines = [header] + [(
        str(row["id"]), row["consumer"], str(row["message_id"]), row["topic"], row["key"],
        str(row["attempts"]), _moment(row["created_at"]), _moment(row["requeued_at"]),
        " ".join(str(row["error"]).split())[:80],
    ) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
              .rstrip(), flush=True)


def _moment(value: object) -> str:
    from datetime import datetime

    return value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else "-"


def _requeue(app: App, dead_letter_id: int) -> None:
    from core.loop_processes import requeue_dead_letter

    direct: Callable[[Envelope], None] | None = None
    if app.settings.bus_kind != "in-process":

        def direct(envelope: Envelope) -> None:
            bus = connected_bus(app.settings, "requeue")
            try:
                bus.publish([envelope])
            finally:
                close_bus(bus)

    try:
        envelope = requeue_dead_letter(app, dead_letter_id, direct)
    except LookupError as gone:
        raise CliError(str(gone)) from gone
    if envelope is None:
        raise CliError(f"no dead letter {dead_letter_id}: `opsgate outbox dead` lists them")
    print(f"requeued dead letter {dead_letter_id}: message {envelope.message_id} "
          f"({envelope.topic}, case {envelope.key}) goes to its consumer again", flush=True)


def health_arguments(parser: argparse.ArgumentParser) -> None:
    from core.messaging.heartbeat import MAX_AGE_S, ROLES

    parser.add_argument("role", choices=ROLES, help="the process to check")
    parser.add_argument("--max-age-s", type=float, default=MAX_AGE_S, metavar="SECONDS",
                        help="unhealthy when a loop has not polled for this long "
                             "(default: %(default)s)")
    parser.add_argument("--max-lag-s", type=float, metavar="SECONDS",
                        help="also unhealthy when the oldest message waiting for this process "
                             "is older (a readiness check; default: lag not checked)")


def run_health(args: argparse.Namespace) -> int:
    import time

    from core.messaging.heartbeat import Heartbeat, HeartbeatError, heartbeat_path, judged

    path = heartbeat_path(settings_of(args).heartbeat_dir, args.role)
    try:
        print(judged(Heartbeat.read(path), time.time(), max_age_s=args.max_age_s,
                     max_lag_s=args.max_lag_s), flush=True)
    except HeartbeatError as unhealthy:
        raise CliError(str(unhealthy)) from unhealthy
    return 0


COMMANDS = (
    Command(
        name="relay",
        summary="publish committed outbox rows to JetStream or Redis Streams (production loop)",
        description="Move unpublished outbox rows onto the bus in id order: NATS JetStream when "
                    "OPSGATE_BUS_URL is set (one stream per topic, $OPSGATE_JETSTREAM_PREFIX_"
                    "<topic>, marked published on the server's acknowledgment), else Redis "
                    "Streams at OPSGATE_REDIS_URL ($OPSGATE_STREAM_PREFIX<topic>). Rows are "
                    "claimed with FOR UPDATE SKIP LOCKED so several relays may run at once. "
                    "Woken by PostgreSQL LISTEN/NOTIFY, polling every $OPSGATE_RELAY_POLL_S "
                    "seconds (default 1.0) as the floor. Without either bus the loop runs "
                    "in-process inside `opsgate serve`. SIGTERM or Ctrl-C stops it after the "
                    "batch in hand.",
        add_arguments=loop_arguments,
        run=run_relay,
    ),
    Command(
        name="consume",
        summary="run consumers on their JetStream or Redis Streams consumers (production loop)",
        description="Run the named consumers (default: all) in this process, each reading its "
                    "topics' streams through a durable consumer (JetStream, OPSGATE_BUS_URL: "
                    "acknowledged after handling, delivered again after "
                    "$OPSGATE_JETSTREAM_ACK_WAIT_S without one) or a consumer group (Redis "
                    "Streams, OPSGATE_REDIS_URL: XREADGROUP, XACK after handling, XAUTOCLAIM of "
                    "entries a dead process left pending longer than "
                    "$OPSGATE_STREAM_CLAIM_IDLE_S) named after it. Each message takes effect "
                    "once (inbox); a message failing $OPSGATE_CONSUMER_MAX_ATTEMPTS times becomes "
                    "a dead letter (`opsgate outbox dead`). SIGTERM or Ctrl-C stops it after the "
                    "messages in hand.",
        add_arguments=consume_arguments,
        run=run_consume,
    ),
    Command(
        name="health",
        summary="is this container's relay or consume loop alive (a probe's command)",
        description="Read the heartbeat the `opsgate relay` or `opsgate consume` process of "
                    "this machine or container writes every 2 s to $OPSGATE_HEARTBEAT_DIR "
                    "(default: the temporary directory): each of its loops' last poll and its "
                    "lag. Exits 0 with one line when every loop polled within --max-age-s, 1 "
                    "with one line saying what is stuck otherwise. It asks no database, so a "
                    "liveness probe does not restart a process that waits out an outage; "
                    "--max-lag-s makes it a readiness check too.",
        add_arguments=health_arguments,
        run=run_health,
    ),
    Command(
        name="outbox",
        summary="inspect the outbox: dead letters and their requeue",
        description="Operator tools for the outbox and its consumers. "
                    "`opsgate outbox dead` lists dead letters; "
                    "`opsgate outbox dead --requeue ID` delivers one again.",
        add_arguments=outbox_arguments,
        run=run_outbox,
    ),
)
