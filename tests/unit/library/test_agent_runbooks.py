"""The runbooks folder as every reader resolves it, and the tool specs the model is given
(exactly the issue's eight tools, none that executes or approves). The ranking over the shipped
runbooks: tests/integration/library/test_runbook_ranking.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.tool_specs import tool_specs
from core.library.runbooks import runbooks_folder

RUNBOOKS = Path(__file__).resolve().parents[3] / "docs" / "runbooks"


def test_the_default_folder_is_found_from_any_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert runbooks_folder("docs/runbooks") == RUNBOOKS
    assert runbooks_folder(str(tmp_path)) == tmp_path


def test_the_model_gets_exactly_the_case_tools_then_the_looks() -> None:
    names = [spec["function"]["name"] for spec in tool_specs()]
    assert names == ["get_case", "list_cases", "case_timeline", "runbooks", "open_case",
                     "record_findings", "propose_plan", "add_note", "name_components",
                     "find_components", "query_metrics", "list_metrics", "list_alerts",
                     "kube_objects", "kube_events", "pod_logs", "rollout_history",
                     "recent_changes", "plan_template"]
    plan = tool_specs()[6]["function"]["parameters"]["properties"]["plan"]
    assert "steps" in plan["properties"] and "$schema" not in plan
