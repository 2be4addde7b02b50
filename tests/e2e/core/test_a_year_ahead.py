"""No test depends on today's date: the tests that hold fixed dates beside "now" pass with the
clock a year ahead, and those judging with the example policies pass inside their deploy
freeze. Debian's ``faketime`` moves the clock of the pytest it starts and of every process that
pytest starts (``opsgate serve`` included); ``make test`` installs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.servers import missing

ROOT = Path(__file__).resolve().parents[3]
AHEAD = "+365d"
DATED = (
    # changes dated 2026-11-27, listed with the default window of the last 24 hours
    "tests/e2e/api/test_changes_intake.py",
    # changes dated 2026-11-27 read back by windows around them
    "tests/integration/changes/test_change_store.py",
)
"""The modules whose tests name fixed dates near a "now" (their own clock or the server's)."""
IN_THE_FREEZE = "@2026-12-25 12:00:00"
FROZEN = ("tests/integration/policy/test_case_components.py",)
"""Modules that judge with docs/examples/policies, whose deploy freeze runs from 2026-12-20 to
2027-01-04: their tests must hold inside it too."""
DEADLINE_S = 600.0  # about 30 s on an idle machine; generous for a loaded one


def faketime() -> str:
    found = shutil.which("faketime")
    if found is None:
        missing("faketime is not installed (Debian's package faketime)")
    return found


def test_the_clock_of_a_process_under_faketime_is_a_year_ahead():
    """The lane below proves nothing unless faketime really moves the clock it runs on."""
    shown = subprocess.run([faketime(), "-f", AHEAD, sys.executable, "-c",
                            "import datetime; print(datetime.datetime.now(datetime.UTC))"],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    ahead = datetime.fromisoformat(shown.strip()) - datetime.now(UTC)
    assert timedelta(days=364) < ahead < timedelta(days=366), shown


@pytest.mark.parametrize(("clock", "modules"), [(AHEAD, DATED), (IN_THE_FREEZE, FROZEN)],
                         ids=["a-year-ahead", "in-the-example-freeze"])
def test_the_dated_tests_pass_on_another_day(clock, modules):
    result = subprocess.run(
        [faketime(), "-f", clock, sys.executable, "-m", "pytest", "-q", "-p", "no:xdist",
         "-p", "no:cacheprovider", *modules],
        cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
