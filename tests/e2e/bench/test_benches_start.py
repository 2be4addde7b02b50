"""The benchmarks ``make bench`` runs for the case service and the gateway start, run at their
smallest size and print their figures as one JSON line last. A fail-closed default once stopped
``bench/transitions.py`` at its first plan (no deciders named, no metric source) and nothing
noticed until the figures were wanted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import POSTGRES_URL, REDIS_URL

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[3]

SMALLEST = {
    "transitions": (["--seconds", "0.2", "--rounds", "1", "--database-url", POSTGRES_URL],
                    "cost_ratio_1"),
    "gateway": (["--requests", "200", "--full-requests", "50", "--rounds", "1",
                 "--redis-url", REDIS_URL, "--postgres-url", POSTGRES_URL], "first_over_ping"),
}


@pytest.mark.parametrize("bench", sorted(SMALLEST))
def test_the_bench_runs_and_prints_its_figures_last(bench: str) -> None:
    args, figure = SMALLEST[bench]
    done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{bench}.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(figures[figure], float | int) and figures[figure] > 0
