"""The agent's tests run where the plan templates' runbook script (``restart-service``) is the
demo's harmless stand-in, first on PATH, and ``agent_app`` allows it: a plan that runs it passes
its dry run at ``plan_ready``, as in ``opsgate demo``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scripts import runbook_script


@pytest.fixture(autouse=True)
def _runbook_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runbook_script(monkeypatch, tmp_path / "runbook-bin")
