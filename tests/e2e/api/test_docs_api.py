"""docs/api.md's "A session with curl", run as written: the section's ``sh`` blocks, in order, by
one bash against a real ``opsgate serve --no-loop`` with ``opsgate relay`` and ``opsgate
consume`` on PostgreSQL (a schema of its own) and Redis Streams (a key prefix of its own), as
production runs it; and once more on NATS JetStream (a ``nats-server -js`` of the test's
own). Each command's documented answer — the ``# <status>[, header: value] [body]`` comment
under it, ``…`` standing for what varies — is compared with the one it got.

Only the server's address is the test's own (a free port for the doc's 8080). ``.venv/bin`` is
not on PATH, as in a reader's shell. A ``curl`` function records each response's headers
(``-D``) so the status is checked even where the doc pipes the body into ``jq``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from bot.sandbox.demo import STAND_INS
from tests.support.nats_server import NatsServer
from tests.support.peers import free_port
from tests.support.processes import Process, clean_env
from tests.support.servers import REDIS_URL

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.loop]

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "api.md"
SECTION = "## A session with curl"
DOC_API = "API=http://127.0.0.1:8080"
SESSION_DEADLINE_S = 180.0
START_DEADLINE_S = 60.0

ANSWER = re.compile(r"# (?P<status>[1-5]\d\d)(?P<headers>(?:, [A-Za-z-]+: (?:\"[^\"]*\"|\S+))*)"
                    r"(?: (?P<body>.*))?$")
HEADER = re.compile(r", ([A-Za-z-]+): (\"[^\"]*\"|\S+)")
CONTINUED = re.compile(r"#\s{2,}(?P<more>\S.*)$")


# -- the doc's session ----------------------------------------------------------------------


@dataclass
class Step:
    """One command of the session (its lines as written) and the answer documented under it."""

    line: int
    command: list[str] = field(default_factory=list)
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""

    @property
    def calls_the_api(self) -> bool:
        return any(re.search(r"\bcurl\b", line) for line in self.command)


def session_blocks(markdown: str) -> list[tuple[int, list[str]]]:
    """The ``sh`` blocks of the session's section, each with the doc line it starts on."""
    lines = markdown.splitlines()
    start = lines.index(SECTION)
    end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("## ")),
               len(lines))
    blocks: list[tuple[int, list[str]]] = []
    inside: list[str] | None = None
    for number in range(start, end):
        line = lines[number]
        if inside is None and line.strip() == "```sh":
            inside = []
            blocks.append((number + 2, inside))
        elif inside is not None and line.strip() == "```":
            inside = None
        elif inside is not None:
            inside.append(line)
    return blocks


def session_steps(markdown: str) -> list[Step]:
    """A command is a run of non-comment lines (a blank line or a comment ends it); a ``# NNN …``
    comment line right under it is its answer, continued by comment lines indented two spaces
    or more. Other comments are prose."""
    steps: list[Step] = []
    for first, block in session_blocks(markdown):
        step: Step | None = None
        ended = answering = False
        for offset, line in enumerate(block):
            text = line.strip()
            if not text.startswith("#") and text:
                if step is None or ended:
                    step, ended = Step(first + offset), False
                    steps.append(step)
                step.command.append(line)
                continue
            if text and step is not None and not ended and (found := ANSWER.match(text)):
                step.status = int(found["status"])
                step.headers = {name.lower(): value for name, value in
                                HEADER.findall(found["headers"] or "")}
                step.body, answering = found["body"] or "", True
            elif text and answering and step is not None and (more := CONTINUED.match(text)):
                step.body += more["more"]
            else:
                answering = False
            ended = True
    return steps


# -- running it -----------------------------------------------------------------------------


def bash_script(steps: list[Step], api: str, out: Path) -> str:
    """The session as one bash script: each step as written, its stdout to ``<n>.out`` and the
    headers of its last response to ``<n>.headers``."""
    parts = [f'curl() {{ command curl -D "{out}/headers" "$@"; }}']
    for n, step in enumerate(steps):
        command = "\n".join(step.command).replace(DOC_API, f"API={api}")
        parts.append(f': > "{out}/headers"\n{{\n{command}\n}} > "{out}/{n}.out"\n'
                     f'cp "{out}/headers" "{out}/{n}.headers"')
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class Got:
    status: int | None
    headers: dict[str, str]
    output: str


def got(out: Path, n: int) -> Got:
    lines = (out / f"{n}.headers").read_text(errors="replace").splitlines()
    status_line = re.match(r"HTTP/\S+ (\d{3})", lines[0]) if lines else None
    headers = {name.strip().lower(): value.strip() for name, _, value in
               (line.partition(":") for line in lines[1:] if ":" in line)}
    return Got(int(status_line[1]) if status_line else None, headers,
               (out / f"{n}.out").read_text(errors="replace"))


def mismatch(step: Step, answer: Got) -> str | None:
    """What differs between the documented answer and the one the command got, if anything."""
    problems = []
    if answer.status != step.status:
        problems.append(f"status {answer.status}, the doc says {step.status}")
    for name, value in step.headers.items():
        if answer.headers.get(name) != value:
            problems.append(f"{name}: {answer.headers.get(name)}, the doc says {value}")
    missing = missing_fragment(step.body, answer.output)
    if missing is not None:
        problems.append(f"no {missing!r} where the doc shows it")
    if not problems:
        return None
    return (f"docs/api.md line {step.line}: {step.command[0].strip()} …\n    "
            + "; ".join(problems) + f"\n    got: {answer.output.strip()[:600]}")


def missing_fragment(pattern: str, output: str) -> str | None:
    """The first of the pattern's ``…``-separated fragments not found, in order, in ``output``
    (whitespace ignored on both sides: the doc wraps long answers)."""
    squeezed = re.sub(r"\s+", "", output)
    at = 0
    for fragment in (re.sub(r"\s+", "", part) for part in pattern.split("…")):
        found = squeezed.find(fragment, at)
        if found < 0:
            return fragment
        at = found + len(fragment)
    return None


def reader_path() -> str:
    """PATH without this interpreter's folder: a reader's shell has no bare ``opsgate``."""
    venv_bin = str(Path(sys.executable).parent)
    return os.pathsep.join(part for part in os.environ.get("PATH", "").split(os.pathsep)
                           if part and Path(part) != Path(venv_bin))


# -- the production shape -------------------------------------------------------------------


@dataclass
class Production:
    base: str
    env: dict[str, str]
    processes: list[Process]

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-2000:]}" for p in self.processes)


@pytest.fixture(params=["redis", pytest.param("jetstream", marks=pytest.mark.nats)])
def production(request: pytest.FixtureRequest, tmp_path: Path, pg_engine: Engine, redis_client,
               redis_prefix: str) -> Iterator[Production]:
    port = free_port()
    nats: NatsServer | None = None
    bus: dict[str, str] = {}
    if request.param == "jetstream":  # the bus; Redis keeps the gateway's claims
        (tmp_path / "nats").mkdir()
        nats = NatsServer(tmp_path / "nats").start()
        bus = {"OPSGATE_BUS_URL": nats.url}
    env = clean_env(**bus,
        OPSGATE_DATABASE_URL=pg_engine.url.render_as_string(hide_password=False),
        OPSGATE_REDIS_URL=REDIS_URL, OPSGATE_STREAM_PREFIX=f"{redis_prefix}stream:",
        OPSGATE_GATEWAY_KEY_PREFIX=f"{redis_prefix}gw:",
        OPSGATE_APPROVERS="U0LEAD",  # the doc's server names its approver
        # The verifier's readings: a stand-in named explicitly where production has Prometheus.
        OPSGATE_STATIC_METRICS='{"http_5xx_ratio": 0.001, "error_rate": 0.001, '
                               '"latency_p95_ms": 120.0, "standby_saturation": 0.3}',
        # The template plan's runbook script: allowed, the demo's stand-in (its dry run passes).
        OPSGATE_SCRIPT_ALLOWLIST='["restart-service"]',
        PATH=f"{STAND_INS}{os.pathsep}{reader_path()}")
    processes = [
        Process("serve", ("serve", "--port", str(port), "--no-loop"), env,
                tmp_path / "serve.log"),
        Process("relay", ("relay",), env, tmp_path / "relay.log"),
        Process("consume", ("consume",), env, tmp_path / "consume.log")]
    world = Production(f"http://127.0.0.1:{port}", env, processes)
    try:
        for process in processes:
            process.start()
        processes[1].wait_for_output("messages waiting", START_DEADLINE_S)
        processes[2].wait_for_output("on JetStream streams" if nats else "on Redis streams",
                                     START_DEADLINE_S)
        _healthy(world)
        yield world
    finally:
        for process in processes:
            process.close()
        if nats is not None:
            nats.stop()


def _healthy(world: Production) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        assert all(p.alive for p in world.processes), world.logs()
        try:
            if httpx.get(f"{world.base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"opsgate serve did not answer in time:\n{world.logs()}")


# -- the tests ------------------------------------------------------------------------------


def test_every_api_call_of_the_session_documents_its_answer():
    steps = session_steps(DOC.read_text())
    calls = [step for step in steps if step.calls_the_api]
    assert len(calls) >= 10, [step.command for step in steps]
    assert [step.line for step in calls if step.status is None] == []
    assert sum(DOC_API in line for step in steps for line in step.command) == 1


def test_the_curl_session_runs_as_written_against_the_production_shape(production, tmp_path):
    for tool in ("bash", "curl", "jq"):
        assert shutil.which(tool, path=production.env["PATH"]), f"{tool} is not installed"
    steps = session_steps(DOC.read_text())
    out = tmp_path / "session"
    out.mkdir()
    script = bash_script(steps, production.base, out)
    ran = subprocess.run(["bash", "-c", script], cwd=ROOT, env=production.env,
                         capture_output=True, text=True, timeout=SESSION_DEADLINE_S,
                         check=False)
    differences = [problem for n, step in enumerate(steps) if step.status is not None
                   and (problem := mismatch(step, got(out, n))) is not None]
    assert differences == [], ("\n".join(differences) + f"\n--- bash stderr\n{ran.stderr[-3000:]}"
                               + f"\n{production.logs()}")
