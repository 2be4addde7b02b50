"""The runbook script the plan templates run (``script.restart``: ``restart-service``), as a test
app allows it: a stand-in on PATH and on the script allow-list, so a plan that runs it passes
its dry run at ``plan_ready`` (a script off the allow-list is refused before the gate)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.sandbox.demo import STAND_INS


def runbook_script(monkeypatch: pytest.MonkeyPatch, folder: Path, *,
                   exit_code: int | None = None) -> dict[str, Any]:
    """``restart-service`` first on PATH (the demo's harmless stand-in, or one that exits with
    ``exit_code``) and the settings that allow it."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "restart-service"
    if exit_code is None:
        script.symlink_to(STAND_INS / "restart-service")
    else:
        script.write_text(f"#!/bin/sh\necho 'restart-service: cannot restart'\nexit {exit_code}\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return {"script_allowlist": ["restart-service"]}


@pytest.fixture
def restart_service(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The settings of an app whose plans may run the demo's stand-in ``restart-service``."""
    return runbook_script(monkeypatch, tmp_path / "runbook-bin")


@contextmanager
def runbook_on_path() -> Iterator[dict[str, Any]]:
    """``restart_service`` outside a test's fixtures (a running bot, as the demo runs): the
    stand-in is on PATH until the block ends."""
    with tempfile.TemporaryDirectory(prefix="runbook-bin-") as folder, \
            pytest.MonkeyPatch.context() as patch:
        yield runbook_script(patch, Path(folder) / "bin")
