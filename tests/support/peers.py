"""The real monitoring peers of the tests, on 127.0.0.1 only: Debian's Prometheus and Alertmanager
as subprocesses with generated configs on free ports, a tiny service they scrape (a gauge the
test sets, and the ``POST /fix`` a plan's ``http.request`` step calls), and opsgate's own REST
API served for them to call. Fixtures start each on demand and stop it at teardown; a missing
binary fails the run (``tests/support/servers.missing``).

Configs are written as JSON, which both servers read as YAML.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from core.evidence.prometheus import prometheus_answer
from core.evidence.sources import EvidenceMissing
from tests.support.servers import missing

PROMETHEUS_BIN = os.environ.get("OPSGATE_TEST_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL_BIN = os.environ.get("OPSGATE_TEST_PROMTOOL", "/usr/bin/promtool")
ALERTMANAGER_BIN = os.environ.get("OPSGATE_TEST_ALERTMANAGER",
                                  "/usr/bin/prometheus-alertmanager")
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
GAUGE = "checkout_p95_seconds"
HEALTHY_P95_S = 0.2
BAD_P95_S = 2.4
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

T = TypeVar("T")


def tail_of(log: Path, lines: int = 40) -> str:
    """The last ``lines`` of a server's log, for the error that says it did not start."""
    try:
        text = log.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


class PeerError(RuntimeError):
    """A peer did not start, stopped answering, or refused a query."""


# Ports for the servers a test starts, below Linux's ephemeral range (32768-60999 by default):
# a port the OS hands out for "any free port" is in that range, and a client connection (the
# other worker's PostgreSQL, Redis and NATS clients) can take it as its local port between the
# probe and the server's bind; it then failed to bind (k-2: opsgate serve, "address already in
# use"). Each xdist worker draws from its own share of the range; a port is handed out once.
_PORTS = range(20000, 32000)
_handed: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1, free a moment ago and below the ephemeral range, that this
    process has not handed out before."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    workers = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), worker + 1)
    share = _PORTS[worker::workers]
    for port in random.sample(share, len(share)):
        if port in _handed:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise AssertionError(f"no free port left in {_PORTS} for worker {worker}")


def poll(check: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.1) -> T:
    """``check()``'s first truthy answer, asked every ``interval_s`` for at most ``timeout_s``;
    ``AssertionError`` naming ``what`` (and the last answer) when none comes."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last answer {answer!r})")
        time.sleep(interval_s)


def require(binary: str) -> str:
    """``binary``'s path; the test fails when it is missing."""
    found = shutil.which(binary)
    if found is None:
        missing(f"{binary} is not installed (make peers installs it)")
    return str(found)


# -- the scraped service ----------------------------------------------------------------------


class MetricService:
    """A service Prometheus scrapes: ``GET /metrics`` exposes its gauges (``checkout_p95_seconds``
    starts at ``initial``) as prometheus-client writes them; ``POST /fix`` records its
    ``Idempotency-Key`` and, when the fix works, brings the gauge down to ``healthy``."""

    def __init__(self, *, fix_works: bool = True, initial: float = HEALTHY_P95_S,
                 healthy: float = HEALTHY_P95_S) -> None:
        self.fix_works = fix_works
        self.healthy = healthy
        self.fix_requests: list[str] = []  # one Idempotency-Key per POST /fix ("" when absent)
        self._registry = CollectorRegistry()
        self._gauges: dict[str, Gauge] = {}
        self._lock = threading.Lock()
        self.set(GAUGE, initial)
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _service_handler(self))
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.target = f"127.0.0.1:{self._http.server_address[1]}"
        self.base_url = f"http://{self.target}"

    def set(self, name: str, value: float) -> None:
        if not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a Prometheus metric name")
        with self._lock:
            if name not in self._gauges:
                self._gauges[name] = Gauge(name, f"{name}, set by the test",
                                           registry=self._registry)
            self._gauges[name].set(value)

    def value(self, name: str = GAUGE) -> float:
        found = self._registry.get_sample_value(name)
        if found is None:
            raise KeyError(name)
        return found

    def exposition(self) -> bytes:
        """The gauges in Prometheus' text format (version 0.0.4), by prometheus-client."""
        return generate_latest(self._registry)

    def fix(self, key: str) -> dict[str, Any]:
        with self._lock:
            self.fix_requests.append(key)
            requests = len(self.fix_requests)
        if self.fix_works:
            self.set(GAUGE, self.healthy)
        return {"fixed": self.fix_works, "requests": requests}

    def start(self) -> MetricService:
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,),
                                        name="metric-service", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> MetricService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._http.server_close()


def _service_handler(service: MetricService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                return self._reply(404, b"not found\n", "text/plain")
            return self._reply(200, service.exposition(), CONTENT_TYPE_PLAIN_0_0_4)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.split("?", 1)[0] != "/fix":
                return self._reply(404, b"not found\n", "text/plain")
            answer = service.fix(self.headers.get("Idempotency-Key", ""))
            return self._reply(200, json.dumps(answer).encode(), "application/json")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


# -- the subprocess peers ---------------------------------------------------------------------


class _Peer:
    """One server binary on a free port of 127.0.0.1, logging into its own folder."""

    name = "peer"

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.base_url = f"http://{self.target}"
        self.log_path = workdir / f"{self.name}.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.auth: tuple[str, str] | None = None  # basic auth the server requires, if any

    def arguments(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> _Peer:
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen([self.binary, *self.arguments()], cwd=self.workdir,
                                         stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise PeerError(f"{self.name} exited with {self._process.returncode} before it "
                                f"was ready:\n{self.log_tail()}")
            with suppress(httpx.HTTPError):
                if httpx.get(self.base_url + "/-/ready", auth=self.auth,
                             timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise PeerError(f"{self.name} not ready on {self.target} within {READY_TIMEOUT_S:g} s:"
                        f"\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminate, then kill after ``STOP_TIMEOUT_S``; closes the log."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return tail_of(self.log_path, lines)


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job: ``targets`` as ``host:port``, read at ``metrics_path``."""

    name: str
    targets: Sequence[str]
    metrics_path: str = "/metrics"


def alert_rule(name: str, expr: str, *, for_s: int = 0, severity: str = "critical",
               summary: str = "") -> dict[str, Any]:
    """One Prometheus alerting rule (the rule file's own keys)."""
    return {"alert": name, "expr": expr, "for": f"{for_s}s", "labels": {"severity": severity},
            "annotations": {"summary": summary or name}}


class Prometheus(_Peer):
    """``prometheus`` scraping ``jobs`` every second and evaluating ``rules`` every second,
    sending alerts to ``alertmanager`` (``host:port``) when given."""

    name = "prometheus"

    def __init__(self, workdir: Path, jobs: Sequence[ScrapeJob], *,
                 rules: Sequence[Mapping[str, Any]] | str = (), alertmanager: str | None = None,
                 history: str | None = None, basic_auth: tuple[str, str] | None = None,
                 binary: str = PROMETHEUS_BIN) -> None:
        super().__init__(binary, workdir)
        self.jobs = list(jobs)
        self.history = history
        self.auth = basic_auth
        self.query_log = workdir / "queries.log"
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "1s", "query_log_file": str(self.query_log)},
            "scrape_configs": [{"job_name": job.name, "metrics_path": job.metrics_path,
                                "static_configs": [{"targets": list(job.targets)}]}
                               for job in self.jobs],
        }
        if rules:
            rule_file = workdir / "rules.yml"
            rule_file.write_text(rules if isinstance(rules, str) else json.dumps(
                {"groups": [{"name": "tests", "interval": "1s", "rules": list(rules)}]},
                indent=2))
            config["rule_files"] = [str(rule_file)]
        if alertmanager:
            config["alerting"] = {"alertmanagers": [{"static_configs": [
                {"targets": [alertmanager]}]}]}
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(json.dumps(config, indent=2))

    def arguments(self) -> list[str]:
        web = [f"--web.config.file={self._web_config()}"] if self.auth else []
        return [f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={self.target}",
                "--rules.alert.resend-delay=1s",
                "--log.level=info", *web]

    def start(self) -> Prometheus:
        if self.history is not None:
            self._backfill(self.history)
        super().start()
        return self

    def _backfill(self, openmetrics: str) -> None:
        """Write ``openmetrics`` (samples with their own timestamps) into the data folder as
        blocks, with promtool, before the server starts: a recorded past, read like any other."""
        source = self.workdir / "history.om"
        source.write_text(openmetrics)
        done = subprocess.run([require(PROMTOOL_BIN), "tsdb", "create-blocks-from",
                               "openmetrics", str(source), str(self.workdir / "data")],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise PeerError(f"promtool could not write the history: {done.stderr[-2000:]}")

    def _web_config(self) -> Path:
        """Basic auth as Prometheus' web config wants it: a bcrypt hash of the password."""
        assert self.auth is not None
        with warnings.catch_warnings():  # deprecated since 3.11; the libc's bcrypt is what we need
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt
        user, password = self.auth
        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))
        path = self.workdir / "web.yml"
        path.write_text(json.dumps({"basic_auth_users": {user: hashed}}))
        return path

    def _get(self, path: str, **params: str) -> Any:
        """The ``data`` of a Prometheus API answer, read as the product reads one
        (``prometheus_answer``: ``success``, else the server's own error text)."""
        try:
            reply = httpx.get(self.base_url + path, params=params, auth=self.auth, timeout=5.0)
        except httpx.HTTPError as exc:
            raise PeerError(f"{self.name} GET {path}: {exc!r}\n{self.log_tail(10)}") from exc
        try:
            return prometheus_answer(reply.content, reply.status_code)["data"]
        except EvidenceMissing as refused:
            raise PeerError(f"{self.name} GET {path} {params}: {refused.message}") from refused

    def queries(self) -> list[dict[str, Any]]:
        """The ``params`` of every query the server answered, oldest first (its query log)."""
        if not self.query_log.exists():
            return []
        return [json.loads(line)["params"] for line in self.query_log.read_text().splitlines()
                if line.strip()]

    def query(self, expr: str) -> dict[str, Any]:
        """``/api/v1/query``'s ``data``: ``{"resultType", "result"}``."""
        data: dict[str, Any] = self._get("/api/v1/query", query=expr)
        return data

    def values(self, expr: str) -> list[float]:
        """The sample values of an instant query (a vector's, sorted, or a scalar's)."""
        data = self.query(expr)
        if data["resultType"] == "scalar":
            return [float(data["result"][1])]
        return sorted(float(sample["value"][1]) for sample in data["result"])

    def wait_for(self, expr: str, predicate: Callable[[list[float]], bool],
                 timeout_s: float = 20.0) -> list[float]:
        """``values(expr)`` once ``predicate`` holds for them, asked every 0.1 s."""
        last: list[list[float]] = [[]]

        def holds() -> bool:
            last[0] = self.values(expr)
            return predicate(last[0])

        poll(holds, timeout_s, f"prometheus: {expr} (last values {last[0]})")
        return last[0]

    def targets_up(self) -> dict[str, bool]:
        """``job/instance`` → whether the target's last scrape succeeded."""
        data = self._get("/api/v1/targets", state="active")
        return {f"{t['labels']['job']}/{t['labels']['instance']}": t["health"] == "up"
                for t in data["activeTargets"]}

    def wait_targets_up(self, timeout_s: float = 20.0) -> dict[str, bool]:
        """Waits until every configured target has been scraped successfully."""
        expected = sum(len(job.targets) for job in self.jobs)

        def all_up() -> dict[str, bool] | None:
            up = self.targets_up()
            return up if len(up) == expected and all(up.values()) else None

        return poll(all_up, timeout_s, "prometheus: every target up")


class Alertmanager(_Peer):
    """``prometheus-alertmanager`` routing every alert, grouped by ``alertname`` and sent within
    about a second, to one webhook with a bearer token; resolutions are sent too. Clustering is
    off (it would bind 9094). ``group_wait`` and ``group_interval`` may be longer (Alertmanager
    gives a notification max(group_interval, 10 s) to be answered)."""

    name = "alertmanager"

    def __init__(self, workdir: Path, webhook_url: str, token: str, *,
                 binary: str = ALERTMANAGER_BIN, group_wait: str = "1s",
                 group_interval: str = "1s") -> None:
        super().__init__(binary, workdir)
        config = {
            "route": {"receiver": "opsgate", "group_by": ["alertname"], "group_wait": group_wait,
                      "group_interval": group_interval, "repeat_interval": "1h"},
            "receivers": [{"name": "opsgate", "webhook_configs": [{
                "url": webhook_url, "send_resolved": True,
                "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
            }]}],
        }
        self.config_path = workdir / "alertmanager.yml"
        self.config_path.write_text(json.dumps(config, indent=2))

    def arguments(self) -> list[str]:
        return [f"--config.file={self.config_path}",
                f"--storage.path={self.workdir / 'data'}",
                f"--web.listen-address={self.target}",
                "--cluster.listen-address=",
                "--log.level=info"]

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds (``/api/v2/alerts``), for assertions and diagnosis."""
        try:
            reply = httpx.get(self.base_url + "/api/v2/alerts", timeout=5.0)
            reply.raise_for_status()
        except httpx.HTTPError as exc:
            raise PeerError(f"alertmanager GET /api/v2/alerts: {exc!r}") from exc
        alerts: list[dict[str, Any]] = reply.json()
        return alerts

    def post_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        """Alerts handed to Alertmanager as Prometheus hands them (``POST /api/v2/alerts``)."""
        try:
            reply = httpx.post(self.base_url + "/api/v2/alerts", json=list(alerts), timeout=60.0)
            reply.raise_for_status()
        except httpx.HTTPError as exc:
            raise PeerError(f"alertmanager POST /api/v2/alerts: {exc!r}") from exc


# -- opsgate's own API, for the peers to call ------------------------------------------------


@contextmanager
def serve_api(app: Any) -> Iterator[str]:
    """opsgate's REST API over ``app`` (a bootstrapped ``core.bootstrap.App``) served by uvicorn
    in a thread on a free port of 127.0.0.1; yields its base URL."""
    import uvicorn

    from core.api import create_api

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_api(app), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, name="opsgate-api", daemon=True)
    thread.start()
    try:
        poll(lambda: server.started, 10, "the opsgate API starts", interval_s=0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def metric_service(request: pytest.FixtureRequest) -> Iterator[MetricService]:
    """A started ``MetricService`` (``checkout_p95_seconds`` healthy, a working fix); other
    settings through indirect parametrization, e.g. ``{"fix_works": False}``."""
    options: dict[str, Any] = getattr(request, "param", {})
    service = MetricService(**options).start()
    yield service
    service.stop()


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[Callable[..., Prometheus]]:
    """``prometheus_server(jobs, *, rules=(), alertmanager=None)`` → a started ``Prometheus``,
    stopped at teardown. ``jobs``: ``ScrapeJob``s, or a ``MetricService`` / ``host:port`` list
    as the one job ``service``."""
    binary = require(PROMETHEUS_BIN)
    started: list[Prometheus] = []

    def start(jobs: Sequence[ScrapeJob] | MetricService | Sequence[str], *,
              rules: Sequence[Mapping[str, Any]] | str = (),
              alertmanager: Alertmanager | str | None = None, history: str | None = None,
              basic_auth: tuple[str, str] | None = None) -> Prometheus:
        workdir = tmp_path / f"prometheus-{len(started)}"
        peer = Prometheus(workdir, _jobs(jobs), rules=rules, binary=binary, history=history,
                          basic_auth=basic_auth,
                          alertmanager=alertmanager.target if isinstance(
                              alertmanager, Alertmanager) else alertmanager)
        started.append(peer)
        peer.start()
        return peer

    yield start
    for peer in reversed(started):
        peer.stop()


@pytest.fixture
def alertmanager_server(tmp_path: Path) -> Iterator[Callable[..., Alertmanager]]:
    """``alertmanager_server(webhook_url, token, **timing)`` → a started ``Alertmanager`` sending
    every group to ``webhook_url`` with ``Authorization: Bearer <token>``, stopped at teardown
    (``timing``: ``group_wait``, ``group_interval``)."""
    binary = require(ALERTMANAGER_BIN)
    started: list[Alertmanager] = []

    def start(webhook_url: str, token: str, **timing: str) -> Alertmanager:
        peer = Alertmanager(tmp_path / f"alertmanager-{len(started)}", webhook_url, token,
                            binary=binary, **timing)
        started.append(peer)
        peer.start()
        return peer

    yield start
    for peer in reversed(started):
        peer.stop()


def _jobs(jobs: Sequence[ScrapeJob] | MetricService | Sequence[str]) -> list[ScrapeJob]:
    if isinstance(jobs, MetricService):
        return [ScrapeJob("service", [jobs.target])]
    if all(isinstance(job, str) for job in jobs):
        return [ScrapeJob("service", [str(job) for job in jobs])]
    return [job for job in jobs if isinstance(job, ScrapeJob)]
