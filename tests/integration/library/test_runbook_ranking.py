"""The one runbook ranking (``Library.find_runbooks``: the agent's and the MCP server's
``runbooks`` tool) over the runbooks shipped in docs/runbooks/, on both databases, by words and
meaning (the embedded model) fused."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine

from core.domain.plan_templates import template_names
from core.library import Library
from core.library.embeddings import EmbeddedModel
from core.library.runbooks import runbook_title

RUNBOOKS = Path(__file__).resolve().parents[3] / "docs" / "runbooks"


@pytest.fixture
def library(engine: Engine) -> Library:
    return Library(engine, EmbeddedModel())


def test_the_shipped_runbooks_name_only_catalog_templates(library: Library) -> None:
    books = sorted(RUNBOOKS.glob("*.md"))
    assert len(books) >= 5
    for book in books:
        found = library.find_runbooks(RUNBOOKS, runbook_title(book.read_text("utf-8"), book))[0]
        assert found["runbook"] == book.stem
        assert set(found["templates"]) <= set(template_names())


@pytest.mark.parametrize(("query", "best"), [
    ("p95 latency jumped after the deploy", "latency-after-deploy"),
    ("5xx error rate spike", "error-rate-spike"),
    ("pods OOMKilled memory keeps growing", "memory-leak"),
    ("region outage fail over to standby", "regional-failover"),
    ("no space left on device ENOSPC", "disk-full"),
])
def test_search_finds_the_runbook_for_the_incident(library: Library, query: str,
                                                   best: str) -> None:
    assert library.find_runbooks(RUNBOOKS, query)[0]["runbook"] == best


def test_nothing_matches_nothing_and_a_missing_folder_is_empty(library: Library,
                                                               tmp_path: Path) -> None:
    assert library.find_runbooks(RUNBOOKS, "zzzz qqqq") == []
    assert library.find_runbooks(tmp_path / "none", "latency") == []


def test_an_edited_runbook_is_read_again_and_a_removed_one_is_not_offered(
        library: Library, tmp_path: Path) -> None:
    book = tmp_path / "queue-backlog.md"
    book.write_text("# Queue backlog\n\n## Steps\n\nScale the consumers.\n", "utf-8")
    assert library.find_runbooks(tmp_path, "queue backlog")[0]["title"] == "Queue backlog"
    book.write_text("# Consumer lag\n\n## Steps\n\nScale the consumers.\n", "utf-8")
    assert library.find_runbooks(tmp_path, "consumer lag")[0]["title"] == "Consumer lag"
    book.unlink()
    assert library.find_runbooks(tmp_path, "consumer lag") == []
