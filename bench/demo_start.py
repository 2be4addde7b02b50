"""Benchmark: how long ``opsgate demo`` takes from being spawned to a listening sandbox page,
beside a bare FastAPI + uvicorn app started the same way, in one run on 127.0.0.1.

Each round spawns, in a fresh temporary directory (so a new SQLite file is migrated each time):
the baseline, ``python -c`` importing fastapi and uvicorn and serving one route; and
``opsgate demo`` on free ports. The clock stops when the page answers ``GET /`` with 200 (for
the demo, and its API ``/healthz`` too: the bot is up). Each process is then stopped with
SIGTERM. Target (issue 7): the demo starts in under 3 s once installed. Figures last, as one
line of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

TARGET_S = 3.0
DEADLINE_S = 60.0
OPSGATE = Path(sys.executable).with_name("opsgate")
BASELINE = """
import sys, fastapi, uvicorn
app = fastapi.FastAPI()
@app.get("/")
def page() -> str:
    return "ok"
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def timed_start(args: list[str], urls: list[str], cwd: str) -> list[float]:
    """Seconds from spawning ``args`` until each of ``urls`` (in turn) answers 200."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSGATE_")}
    started = time.perf_counter()
    process = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        pending, answered = list(urls), []
        while pending:
            if process.poll() is not None:
                raise RuntimeError(f"{args[:2]} exited with {process.returncode}")
            if time.perf_counter() - started > DEADLINE_S:
                raise RuntimeError(f"{args[:2]} did not listen within {DEADLINE_S:.0f} s")
            if answers(pending[0]):
                pending.pop(0)
                answered.append(time.perf_counter() - started)
            else:
                time.sleep(0.01)
        return answered
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def demo_command(port: int, api_port: int) -> list[str]:
    base = [str(OPSGATE)] if OPSGATE.exists() else [sys.executable, "-m", "bot.cli"]
    return [*base, "demo", "--port", str(port), "--api-port", str(api_port)]


def one_round() -> tuple[float, float, float]:
    """The baseline's start, the demo's page alone, the demo with its API (the bot) too."""
    with tempfile.TemporaryDirectory(prefix="opsgate-bench-") as where:
        port = free_port()
        (baseline,) = timed_start([sys.executable, "-c", BASELINE, str(port)],
                                  [f"http://127.0.0.1:{port}/"], where)
        port, api_port = free_port(), free_port()
        page, demo = timed_start(
            demo_command(port, api_port),
            [f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{api_port}/healthz"], where)
    return baseline, page, demo


SHORT: dict[str, Any] = {"rounds": 1, "warm": False}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="spawns of each (default 5)")
    parser.add_argument("--no-warm", dest="warm", action="store_false",
                        help="no untimed round first (the page cache and bytecode as found)")
    parser.add_argument("--short", action="store_true",
                        help=f"seconds and small sizes: {SHORT}")
    args = parser.parse_args()
    if args.short:
        vars(args).update(SHORT)
    if args.warm:
        one_round()  # warm the OS page cache and the bytecode: "once installed"
    baselines, pages, demos = [], [], []
    for n in range(1, args.rounds + 1):
        baseline, page, demo = one_round()
        baselines.append(baseline)
        pages.append(page)
        demos.append(demo)
        say(f"round {n}: baseline {baseline:.2f} s, opsgate demo page {page:.2f} s, "
            f"page and bot {demo:.2f} s")
    demo_p50, base_p50 = statistics.median(demos), statistics.median(baselines)
    print(f"{'spawn to listening':<34} {'p50 s':>7} {'max s':>7}")
    print(f"{'bare fastapi + uvicorn':<34} {base_p50:>7.2f} {max(baselines):>7.2f}")
    print(f"{'opsgate demo: the page':<34} {statistics.median(pages):>7.2f} {max(pages):>7.2f}")
    print(f"{'opsgate demo: page + API (bot)':<34} {demo_p50:>7.2f} {max(demos):>7.2f}")
    print(json.dumps({
        "rounds": args.rounds, "baseline_start_s": round(base_p50, 3),
        "baseline_start_max_s": round(max(baselines), 3),
        "page_start_s": round(statistics.median(pages), 3), "demo_start_s": round(demo_p50, 3),
        "demo_start_max_s": round(max(demos), 3), "ratio": round(demo_p50 / base_p50, 2),
        "target_s": TARGET_S, "target_met": max(demos) < TARGET_S,
    }, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
