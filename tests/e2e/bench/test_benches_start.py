"""Every benchmark in ``bench/`` runs its short mode (``--short``: seconds, small sizes) to the
end and prints its figures as one JSON line last, each figure ``make bench`` reports there. No
timing is judged here (targets are the benches' own, as ratios): an exception, a non-zero exit
or a missing figure fails. A bench's stand-in once lagged the interface it stands in for
(issue 43: ``SlowAgent.converse()`` got an unexpected keyword argument) and ``make bench``
stopped halfway with nobody told; a new bench without a row here fails too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.nats_server import NatsServer
from tests.support.servers import POSTGRES_URL, REDIS_URL

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"

SHORT: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "alerts": (["--postgres-url", POSTGRES_URL],
               ("accepted_per_s", "intake_p50_ms", "intake_p99_ms", "due_p99_ms", "cases_opened",
                "gate_us_largest", "gate_us_quiet", "gate_ratio")),
    "agent": ([], ("scenarios", "baseline_prompt_tokens", "scripted.model_calls_per_case",
                   "offline.tokens_in_ratio")),
    "click_to_step": (["--postgres-url", POSTGRES_URL],
                      ("click_to_step_p50_ms", "click_to_step_p99_ms", "reply_p50_ms",
                       "approve_to_relay_p50_ms", "relay_to_step_p50_ms", "measured")),
    "demo_start": ([], ("baseline_start_s", "demo_start_s", "ratio")),
    "gateway": (["--redis-url", REDIS_URL, "--postgres-url", POSTGRES_URL],
                ("first_over_ping",)),
    "librarian": (["--postgres-url", POSTGRES_URL],
                  ("postgres.query_p50_ms", "sqlite.query_p50_ms", "postgres.speedup_p50")),
    "outbox": (["--redis-url", REDIS_URL, "--postgres-url", POSTGRES_URL],
               ("throughput_ratio", "p99_ms", "ratio_ceiling", "serial_ratio",
                "jetstream.throughput_ratio", "jetstream.p99_ms")),
    "slack_ack": (["--postgres-url", POSTGRES_URL],
                  ("ack_p50_ms", "ack_p99_ms", "baseline_p99_ms", "agent_runs")),
    "transitions": (["--database-url", POSTGRES_URL],
                    ("cost_ratio_1", "cpu_us_per_transition_1", "statements_per_transition")),
}
"""Each bench's arguments besides ``--short`` (the test's own servers), and the figures its
last line must hold (a dotted name reads a nested one)."""

OWN_TESTS = {"library": "test_library_bench.py", "policy": "test_benches_start.py"}
"""Benches whose short mode a test of their own runs, judging more of their figures."""

NATS_BENCHES = {"outbox", "click_to_step"}
"""Benches that also need a nats-server -js: each gets one of the test's own."""

NOT_BENCHES = {"scenarios"}  # the agent scenarios bench/agent.py and tests/agent share


def figure(figures: dict[str, Any], dotted: str) -> Any:
    found: Any = figures
    for name in dotted.split("."):
        assert isinstance(found, dict) and name in found, f"{dotted} missing: {figures}"
        found = found[name]
    return found


def last_json_line(bench: str, args: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(BENCH / f"{bench}.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]  # a missed target is a figure, not a failure
    lines = done.stdout.strip().splitlines()
    assert lines, f"{bench} printed nothing: {done.stderr[-3000:]}"
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


def test_every_bench_has_a_short_run_here() -> None:
    benches = {path.stem for path in BENCH.glob("*.py")} - NOT_BENCHES
    assert benches == set(SHORT) | set(OWN_TESTS)
    for bench in benches:
        assert "--short" in (BENCH / f"{bench}.py").read_text("utf-8"), bench
    for bench, test in OWN_TESTS.items():
        assert f'last_json_line("{bench}", ["--short"' in (
            Path(__file__).parent / test).read_text("utf-8"), bench


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.nats
@pytest.mark.parametrize("bench", sorted(SHORT))
def test_the_bench_runs_short_and_prints_its_figures_last(bench: str, tmp_path: Path) -> None:
    args, names = SHORT[bench]
    if bench in NATS_BENCHES:
        with NatsServer(tmp_path) as nats:
            figures = last_json_line(bench, ["--short", *args, "--nats-url", nats.url])
    else:
        figures = last_json_line(bench, ["--short", *args])
    for name in names:
        found = figure(figures, name)
        assert isinstance(found, float | int) and not isinstance(found, bool), (name, found)
        assert found > 0, (name, found)
    if bench == "slack_ack":  # every mention's agent run happened, after its ack
        assert figures["agent_runs"] == figures["mentions"], figures
    if bench == "click_to_step":  # every click's step reached the target
        assert figures["measured"] == figures["cases"] and figures["missed"] == 0, figures
    if bench == "alerts":  # one case per alert group, whatever the storm
        assert figures["cases_opened"] == figures["groups"] > 0, figures


POLICY_FIGURES = ("evaluate_p50_ms", "evaluate_p99_ms", "slack_click_p50_ms",
                  "slack_click_p99_ms", "slack_ack_p50_ms", "core_click_p50_ms",
                  "core_click_p99_ms", "baseline_click_p50_ms", "baseline_click_p99_ms",
                  "share_p50", "share_p99", "core_click_share_p50", "target_share", "met",
                  "policies", "entities")


def test_the_policy_bench_runs_and_prints_the_policy_share_of_a_click_last() -> None:
    """SQLite only: 50 policies and 1,000 catalog entities as files the running bot reads, a few
    signed Slack Approve clicks; the headline share is the evaluation's of the Slack click."""
    figures = last_json_line("policy", ["--short"])
    assert set(POLICY_FIGURES) <= set(figures)
    assert (figures["policies"], figures["entities"]) == (50, 1000)
    for share in ("share_p50", "share_p99", "core_click_share_p50"):
        # a share, but of two percentiles measured apart: above 1 on a loaded machine at p99
        assert isinstance(figures[share], float | int) and figures[share] > 0
    assert figures["share_p50"] == pytest.approx(
        figures["evaluate_p50_ms"] / figures["slack_click_p50_ms"], abs=0.002)
    assert figures["core_click_share_p50"] == pytest.approx(
        figures["evaluate_p50_ms"] / figures["core_click_p50_ms"], abs=0.002)
    assert figures["target_share"] == 0.1
    assert figures["met"] is (figures["share_p50"] <= 0.1)
