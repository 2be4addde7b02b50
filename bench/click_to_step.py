"""Benchmark: the click a person feels, from pressing Approve to the first step's request at its
target, on PostgreSQL + NATS JetStream, with opsgate's own processes, on 127.0.0.1.

The loop runs as in production, three ``opsgate`` processes on a scratch PostgreSQL schema and
JetStream streams of a fresh prefix: ``serve --no-loop`` (the REST API), ``relay`` (outbox ->
JetStream, woken by the outbox NOTIFY) and ``consume executor`` (its JetStream readers run the
plan's steps). Each of ``--cases`` (200) cases is brought to the gate beforehand, outside the
timed section, with a plan whose first step is an ``http.request`` POST to a target server of the
bench's own (127.0.0.1, recording when each request arrives). A click is ``POST
/case/{id}/approve`` by an approver token linked to a person (the REST twin of the Slack button:
the same ``CaseService.approve_plan``), one click at a time, each waited for at the target before
the next. Measured per click: from sending the POST to the target holding the step's request
(``click_to_step``), and to the approve reply (``reply``); and its legs, from the ``cmd.exec.run``
outbox row's timestamps: the approve's transaction to the relay's claim, that claim to the
step's request. Figures last, as one line of JSON, with
the load average around the run: every figure here is wall time on a shared machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import Engine, select

from bot.sandbox.serving import free_port
from core import principals
from core.bootstrap import bootstrap
from core.db.tables import outbox
from core.domain.commands import OpenCase, TransitionCase
from core.domain.fsm import CaseEvent
from core.domain.messages import Topic
from core.errors import Unavailable
from core.messaging.jetstream.bus import JetStreamBus
from core.messaging.jetstream.config import JetStreamConfig
from core.migrate import scratch_schema
from core.settings import Settings

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
NATS_URL = "nats://127.0.0.1:4222"
HOST = "127.0.0.1"
APPROVER = "U0BENCHAPPROVER"  # a Slack user id, as OPSGATE_APPROVERS names people
METRICS = {"http_5xx_ratio": 0.001}  # the verify check's reading (never reached here)
STEP_WAIT_S = 30.0


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- the target: a server on 127.0.0.1 noting when each case's step arrived --------------------


@dataclass
class Target:
    """Answers every POST 200 and notes when the first request naming each case arrived."""

    arrived: dict[str, float] = field(default_factory=dict)
    arrived_wall: dict[str, float] = field(default_factory=dict)  # the epoch, as the database's
    requests: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def note(self, body: bytes) -> None:
        now, wall = time.perf_counter(), time.time()
        case_id = str(json.loads(body or b"{}").get("case_id", ""))
        with self.changed:
            self.requests += 1
            self.arrived.setdefault(case_id, now)
            self.arrived_wall.setdefault(case_id, wall)
            self.changed.notify_all()

    def wait_for(self, case_id: str, timeout_s: float) -> float | None:
        with self.changed:
            self.changed.wait_for(lambda: case_id in self.arrived, timeout_s)
            return self.arrived.get(case_id)


@contextmanager
def target_server(target: Target) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        replied: ClassVar[bytes] = b'{"applied": true}'

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            target.note(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(self.replied)))
            self.end_headers()
            self.wfile.write(self.replied)

        def log_message(self, *_args: Any) -> None:
            return None

    server = ThreadingHTTPServer((HOST, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def step_plan(url: str, case_id: UUID) -> dict[str, Any]:
    """A plan a person must approve (risk 0.5) whose first step POSTs to the target."""
    return {
        "title": "tell the downstream service",
        "risk_score": 0.5,
        "steps": [{"action": "http.request",
                   "params": {"method": "POST", "url": url, "json": {"case_id": str(case_id)}},
                   "timeout_s": 10, "retry": 0}],
        "rollback": {"action": "noop", "params": {"note": "nothing to undo"}},
        "verify": {"checks": [{"metric": "http_5xx_ratio", "below": 0.01}]},
    }


# -- opsgate's processes ------------------------------------------------------------------------


@dataclass
class Process:
    """One ``opsgate`` subprocess, its output in a log file of its own."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        opsgate = Path(sys.executable).with_name("opsgate")
        command = [str(opsgate)] if opsgate.exists() else [sys.executable, "-m", "core.cli"]
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen([*command, *self.args], env=self.env, stdout=out,
                                          stderr=subprocess.STDOUT)

    def wait_for(self, text: str, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log.read_text(errors="replace"):
            if self.popen is None or self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} never said {text!r}: {self.tail()}")
            time.sleep(0.05)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def environment(database_url: str, nats_url: str, prefix: str, target: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("OPSGATE_")}
    return {**env, "OPSGATE_DATABASE_URL": database_url, "OPSGATE_BUS_URL": nats_url,
            "OPSGATE_JETSTREAM_PREFIX": prefix, "OPSGATE_APPROVERS": json.dumps([APPROVER]),
            "OPSGATE_HTTP_ALLOWLIST": json.dumps([target + "/"]),
            "OPSGATE_STATIC_METRICS": json.dumps(METRICS), "OPSGATE_RELAY_POLL_S": "1"}


@contextmanager
def processes(env: dict[str, str], folder: Path, port: int) -> Iterator[None]:
    serve = Process("serve", ("serve", "--no-loop", "--host", HOST, "--port", str(port),
                              "--log-level", "warning"), env, folder / "serve.log")
    relay = Process("relay", ("relay", "--progress-s", "60"), env, folder / "relay.log")
    consume = Process("consume", ("consume", "executor", "--workers", "2",
                                  "--progress-s", "60"), env, folder / "consume.log")
    started = [serve, relay, consume]
    try:
        for process in started:
            process.start()
        serve.wait_for("opsgate API on")
        relay.wait_for("messages waiting")
        consume.wait_for("reader(s) each) on")
        wait_http(port)
        yield
    finally:
        for process in started:
            process.stop()


def wait_http(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=5)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            conn.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def jetstream_streams(nats_url: str) -> Iterator[str]:
    """A fresh stream prefix; its streams removed afterwards."""
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    try:
        yield prefix
    finally:
        bus = JetStreamBus(JetStreamConfig((nats_url,), prefix=prefix), name="bench-cleanup")
        try:
            bus.connect()
            for info in bus._call(bus.js.streams_info(), 10):
                if info.config.name and info.config.name.startswith(f"{prefix}_"):
                    bus._call(bus.js.delete_stream(info.config.name), 10)
        except Unavailable as exc:
            say(f"could not remove the streams of {prefix}: {exc.message}")
        finally:
            bus.close()


# -- the cases at the gate, and the clicks ------------------------------------------------------


def to_gate(engine: Engine, database_url: str, target: str, count: int) -> list[tuple[UUID, str]]:
    """``count`` cases waiting at the gate on a plan whose first step calls the target: each
    one's id and plan hash."""
    settings = Settings(_env_file=None, database_url=database_url, redis_url=None,
                        approvers=[APPROVER], static_metrics=METRICS,
                        http_allowlist=[target + "/"])
    app = bootstrap(settings, engine=engine)
    waiting = []
    try:
        for n in range(count):
            opened = app.cases.open_case(OpenCase(title=f"checkout errors, shard {n}",
                                                  actor="pagerduty"), uuid.uuid4().hex).data()
            case_id = UUID(opened["case_id"])
            moved: dict[str, Any] = {}
            for event, plan in ((CaseEvent.START_ANALYSIS, None),
                                (CaseEvent.ANALYSIS_DONE, None),
                                (CaseEvent.PLAN_READY, step_plan(f"{target}/step", case_id))):
                moved = dict(app.cases.transition(
                    TransitionCase(case_id, event, actor="bench-planner", plan=plan),
                    uuid.uuid4().hex).data())
            waiting.append((case_id, str(moved["plan_hash"])))
    finally:
        app.close()
    return waiting


@dataclass
class Clicks:
    port: int
    token: str
    to_step_ms: list[float] = field(default_factory=list)
    reply_ms: list[float] = field(default_factory=list)
    measured: list[UUID] = field(default_factory=list)
    missed: int = 0

    def click(self, conn: http.client.HTTPConnection, target: Target, case_id: UUID,
              digest: str) -> None:
        body = json.dumps({"plan_hash": digest})
        headers = {"Authorization": f"Bearer {self.token}", "Idempotency-Key": uuid.uuid4().hex,
                   "Content-Type": "application/json"}
        started = time.perf_counter()
        conn.request("POST", f"/case/{case_id}/approve", body, headers)
        response = conn.getresponse()
        answer = response.read()
        replied = time.perf_counter()
        if response.status != 200:
            raise RuntimeError(f"approve answered {response.status}: {answer[:500]!r}")
        arrived = target.wait_for(str(case_id), STEP_WAIT_S)
        if arrived is None:
            self.missed += 1
            return
        self.reply_ms.append((replied - started) * 1e3)
        self.to_step_ms.append((arrived - started) * 1e3)
        self.measured.append(case_id)


def legs(engine: Engine, target: Target, case_ids: list[UUID]) -> tuple[list[float], list[float]]:
    """Per measured click, from its ``cmd.exec.run`` outbox row: the approve's transaction to the
    relay's claim of the row (``published_at - created_at``), and that claim to the step's
    request at the target (JetStream, the executor's fetch, its run up to the step)."""
    query = (select(outbox.c.key, outbox.c.created_at, outbox.c.published_at)
             .where(outbox.c.topic == Topic.EXEC_RUN))
    with engine.connect() as conn:
        rows = {row.key: row for row in conn.execute(query)}
    to_relay, to_step = [], []
    for case_id in case_ids:
        row = rows.get(str(case_id))
        if row is None or row.published_at is None:
            continue
        to_relay.append((row.published_at - row.created_at).total_seconds() * 1e3)
        to_step.append((target.arrived_wall[str(case_id)] - row.published_at.timestamp()) * 1e3)
    return to_relay, to_step


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def measure(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    target = Target()
    port = free_port(HOST)
    load_before = os.getloadavg()[0]
    with ExitStack() as stack:
        engine = stack.enter_context(scratch_schema(args.postgres_url, prefix="bench"))
        database_url = engine.url.render_as_string(hide_password=False)
        url = stack.enter_context(target_server(target))
        prefix = stack.enter_context(jetstream_streams(args.nats_url))
        say(f"bringing {args.cases + args.warmup} cases to the gate")
        waiting = to_gate(engine, database_url, url, args.cases + args.warmup)
        _, token = principals.create(engine, "bench-approver", "approver", APPROVER)
        say("starting opsgate serve, relay and consume executor")
        stack.enter_context(processes(environment(database_url, args.nats_url, prefix, url),
                                      folder, port))
        clicks = Clicks(port, token)
        conn = http.client.HTTPConnection(HOST, port, timeout=30)
        for n, (case_id, digest) in enumerate(waiting):
            if n == args.warmup:  # the warm-up clicks' figures go
                clicks = Clicks(port, token, missed=clicks.missed)
            clicks.click(conn, target, case_id, digest)
        conn.close()
        to_relay, to_target = legs(engine, target, clicks.measured)
        say(f"{len(clicks.to_step_ms)} clicks measured, {clicks.missed} steps never arrived")
    if not clicks.to_step_ms:
        raise RuntimeError("no click's step reached the target")
    steps, replies = clicks.to_step_ms, clicks.reply_ms
    return {
        "cases": args.cases, "measured": len(steps), "missed": clicks.missed,
        "click_to_step_p50_ms": round(statistics.median(steps), 2),
        "click_to_step_p99_ms": round(percentile(steps, 0.99), 2),
        "click_to_step_max_ms": round(max(steps), 2),
        "reply_p50_ms": round(statistics.median(replies), 2),
        "reply_p99_ms": round(percentile(replies, 0.99), 2),
        "after_reply_p50_ms": round(statistics.median(s - r for s, r in zip(steps, replies,
                                                                             strict=True)), 2),
        "approve_to_relay_p50_ms": round(statistics.median(to_relay), 2),
        "approve_to_relay_p99_ms": round(percentile(to_relay, 0.99), 2),
        "relay_to_step_p50_ms": round(statistics.median(to_target), 2),
        "relay_to_step_p99_ms": round(percentile(to_target, 0.99), 2),
        "target_requests": target.requests,
        "cpus": os.cpu_count() or 1,
        "load_avg_before": round(load_before, 2),
        "load_avg_after": round(os.getloadavg()[0], 2),
    }


SHORT: dict[str, Any] = {"cases": 8, "warmup": 2}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200,
                        help="measured clicks, one case each (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="clicks before the measured ones (default: %(default)s)")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--nats-url", default=NATS_URL,
                        help="a nats-server -js (default: %(default)s)")
    parser.add_argument("--short", action="store_true", help=f"small sizes: {SHORT}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    if not (1 <= args.cases <= 5_000 and 0 <= args.warmup <= 1_000):
        parser.error("keep it bounded: 1..5,000 cases, 0..1,000 warm-up clicks")
    with tempfile.TemporaryDirectory(prefix="click-bench-") as logs:
        folder = Path(logs)
        try:
            figures = measure(args, folder)
        except Exception:
            for log in sorted(folder.glob("*.log")):
                say(f"{log.name}:\n{log.read_text(errors='replace')[-1500:]}")
            raise
    print(f"Approve click -> first step's request at the target, {figures['measured']} clicks "
          f"(PostgreSQL + JetStream, 2 processes besides the API; load average "
          f"{figures['load_avg_before']:g} before, {figures['load_avg_after']:g} after)")
    print(f"  click -> step: p50 {figures['click_to_step_p50_ms']} ms, "
          f"p99 {figures['click_to_step_p99_ms']} ms (max {figures['click_to_step_max_ms']})")
    print(f"  click -> approve reply: p50 {figures['reply_p50_ms']} ms, "
          f"p99 {figures['reply_p99_ms']} ms")
    print(f"  approve's transaction -> the relay's claim of cmd.exec.run: p50 "
          f"{figures['approve_to_relay_p50_ms']} ms, p99 {figures['approve_to_relay_p99_ms']} ms; "
          f"that claim -> the step at the target: p50 {figures['relay_to_step_p50_ms']} ms, "
          f"p99 {figures['relay_to_step_p99_ms']} ms")
    print(json.dumps(figures, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
