"""The one runbook ranking (``find_runbooks``, the agent's ``runbooks``) over the runbooks
shipped in docs/runbooks/, and the tool specs the model is given (exactly the issue's eight
tools, none that executes or approves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.tool_specs import tool_specs
from core.domain.plan_templates import template_names
from core.library.runbooks import find_runbooks, load_runbooks, runbooks_folder

RUNBOOKS = Path(__file__).resolve().parents[3] / "docs" / "runbooks"


def test_the_shipped_runbooks_name_only_catalog_templates() -> None:
    books = load_runbooks(RUNBOOKS)
    assert len(books) >= 5
    for book in books:
        found = find_runbooks(RUNBOOKS, book.title)[0]
        assert found["runbook"] == book.name
        assert set(found["templates"]) <= set(template_names())


@pytest.mark.parametrize(("query", "best"), [
    ("p95 latency jumped after the deploy", "latency-after-deploy"),
    ("5xx error rate spike", "error-rate-spike"),
    ("pods OOMKilled memory keeps growing", "memory-leak"),
    ("region outage fail over to standby", "regional-failover"),
    ("no space left on device ENOSPC", "disk-full"),
])
def test_search_finds_the_runbook_for_the_incident(query: str, best: str) -> None:
    assert find_runbooks(RUNBOOKS, query)[0]["runbook"] == best


def test_the_default_folder_is_found_from_any_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert runbooks_folder("docs/runbooks") == RUNBOOKS
    assert runbooks_folder(str(tmp_path)) == tmp_path


def test_nothing_matches_nothing_and_a_missing_folder_is_empty(tmp_path: Path) -> None:
    assert find_runbooks(RUNBOOKS, "zzzz qqqq") == []
    assert find_runbooks(tmp_path / "none", "latency") == []


def test_the_model_gets_exactly_the_case_tools_then_the_looks() -> None:
    names = [spec["function"]["name"] for spec in tool_specs()]
    assert names == ["get_case", "list_cases", "case_timeline", "runbooks", "open_case",
                     "record_findings", "propose_plan", "add_note", "name_components",
                     "find_components", "query_metrics", "list_metrics", "list_alerts",
                     "kube_objects", "kube_events", "pod_logs", "rollout_history",
                     "recent_changes", "plan_template"]
    plan = tool_specs()[6]["function"]["parameters"]["properties"]["plan"]
    assert "steps" in plan["properties"] and "$schema" not in plan
