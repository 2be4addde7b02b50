"""The benchmarks ``make bench`` runs for the case service and the gateway, and the policy at
the click (issue 27), start, run at their smallest size and print their figures as one JSON line
last. A fail-closed default once stopped ``bench/transitions.py`` at its first plan (no deciders
named, no metric source) and nothing noticed until the figures were wanted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import POSTGRES_URL, REDIS_URL

ROOT = Path(__file__).resolve().parents[3]

SMALLEST = {
    "transitions": (["--seconds", "0.2", "--rounds", "1", "--database-url", POSTGRES_URL],
                    "cost_ratio_1"),
    "gateway": (["--requests", "200", "--full-requests", "50", "--rounds", "1",
                 "--redis-url", REDIS_URL, "--postgres-url", POSTGRES_URL], "first_over_ping"),
}


POLICY_FIGURES = ("evaluate_p50_ms", "evaluate_p99_ms", "slack_click_p50_ms",
                  "slack_click_p99_ms", "slack_ack_p50_ms", "core_click_p50_ms",
                  "core_click_p99_ms", "baseline_click_p50_ms", "baseline_click_p99_ms",
                  "share_p50", "share_p99", "core_click_share_p50", "target_share", "met",
                  "policies", "entities")


def last_json_line(bench: str, args: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{bench}.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("bench", sorted(SMALLEST))
def test_the_bench_runs_and_prints_its_figures_last(bench: str) -> None:
    args, figure = SMALLEST[bench]
    figures = last_json_line(bench, args)
    assert isinstance(figures[figure], float | int) and figures[figure] > 0


def test_the_policy_bench_runs_and_prints_the_policy_share_of_a_click_last() -> None:
    """SQLite only: 50 policies and 1,000 catalog entities as files the running bot reads, a few
    signed Slack Approve clicks; the headline share is the evaluation's of the Slack click."""
    figures = last_json_line("policy", ["--smallest"])
    assert set(POLICY_FIGURES) <= set(figures)
    assert (figures["policies"], figures["entities"]) == (50, 1000)
    for share in ("share_p50", "share_p99", "core_click_share_p50"):
        assert isinstance(figures[share], float | int) and 0 < figures[share] <= 1
    assert figures["share_p50"] == pytest.approx(
        figures["evaluate_p50_ms"] / figures["slack_click_p50_ms"], abs=0.002)
    assert figures["core_click_share_p50"] == pytest.approx(
        figures["evaluate_p50_ms"] / figures["core_click_p50_ms"], abs=0.002)
    assert figures["target_share"] == 0.1
    assert figures["met"] is (figures["share_p50"] <= 0.1)
