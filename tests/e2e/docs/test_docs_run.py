"""The pages that show shell commands run as written (``tests/support/docs.py`` says how a page
is read): README.md, docs/api.md, docs/approvals.md, docs/deploy.md, docs/evidence.md and
docs/operations.md, each block in order from a scratch clone, what each shows compared with what
it printed. A block a page does not run says why right above it; one that names a test is run
by that test."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.library.embeddings import EmbeddedModel
from tests.support.docs import ROOT, page_blocks, run_page, same_lines, scratch_clone, steps
from tests.support.openai_stub import embeddings_stub
from tests.support.peers import free_port

PAGES = ("README.md", "docs/api.md", "docs/approvals.md", "docs/deploy.md", "docs/evidence.md",
         "docs/operations.md")
OLLAMA = "http://127.0.0.1:11434/v1"
"""docs/evidence.md's embedding endpoint: a local stub answering as nomic-embed-text does."""


@contextmanager
def own_values(page: str) -> Iterator[list[tuple[str, str]]]:
    """The page's example values the test replaces by its own: a free port for 8080 (servers of
    other tests share this machine), the stub for evidence.md's Ollama."""
    if page == "docs/evidence.md":
        with embeddings_stub(lambda texts: [v * 3 for v in EmbeddedModel().embed(texts)]) as (
                stub, server):
            yield [(OLLAMA, f"{server.base}/v1")]
            assert {request["model"] for request in stub.requests} == {"nomic-embed-text"}
        return
    runs = "\n".join(block.text for block in page_blocks(page) if block.not_run is None)
    yield [("8080", str(free_port()))] if "8080" in runs else []


@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs_as_written(page: str, tmp_path: Path) -> None:
    clone = scratch_clone(tmp_path / "clone")
    with own_values(page) as replaced:
        ran = run_page(page, clone, replaced)
    problems = ran.problems()
    assert problems == [], "\n\n".join(problems) + f"\n--- bash stderr\n{ran.stderr[-3000:]}"


@pytest.mark.parametrize("page", PAGES)
def test_every_block_runs_or_says_why_not(page: str) -> None:
    for block in page_blocks(page):
        if block.not_run is None:
            assert steps(block), f"{block.where}: a shell block with no command"
            continue
        assert len(block.not_run.split()) >= 3, f"{block.where}: say why it is not run"
        for named in re.findall(r"tests/\S+?\.py", block.not_run):
            test = ROOT / named
            assert test.is_file(), f"{block.where}: {named} does not exist"


def test_a_page_that_uses_bare_opsgate_is_refused() -> None:
    for page in PAGES:
        for block in page_blocks(page):
            for step in steps(block):
                # kubectl and docker name the image's opsgate (on its PATH) and the namespace
                command = " ".join(line.partition(" #")[0] for line in step.command
                                   if not line.lstrip().startswith("#")
                                   and not re.search(r"\b(kubectl|docker)\b", line))
                assert not re.search(r"(^|[\s;|&(])opsgate ", command), \
                    f"{step.where}: write .venv/bin/opsgate, as make install leaves it"


def test_numbers_aside_and_the_ellipsis_mean_only_that() -> None:
    shown = ["reindexed 8 documents (29 passages) in 0.1 s"]
    assert same_lines(shown, ["reindexed 12 documents (40 passages) in 3.4 s"], numbers_aside=True)
    assert not same_lines(shown, ["reindexed 12 documents (40 passages) in 3.4 s", "more"],
                          numbers_aside=True)
    assert not same_lines(shown, ["reindexed 12 cases (40 passages) in 3.4 s"], numbers_aside=True)
    assert not same_lines(shown, ["reindexed 12 documents (40 passages) in 3.4 s"])
    assert same_lines(["a … z"], ["a anything z"]) and not same_lines(["a … z"], ["a y"])


def test_the_demo_port_the_readme_gives_is_the_one_make_passes() -> None:
    readme = (ROOT / "README.md").read_text()
    given = re.search(r'^make demo DEMO_ARGS="(--port \d+)"', readme, flags=re.MULTILINE)
    assert given, "README no longer shows how to give make demo a port"
    planned = subprocess.run(["make", "--no-print-directory", "-n", "demo",
                              f'DEMO_ARGS={given[1]}'], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=True)
    assert planned.stdout.splitlines()[-1] == f".venv/bin/opsgate demo {given[1]}"
