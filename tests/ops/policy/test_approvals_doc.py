"""docs/approvals.md as written. Its shell blocks are run by tests/e2e/docs/test_docs_run.py
(``tests/support/docs.py``); here: it shows each command of the policy and catalog it is about, a
block tagged ``file=PATH`` (```` ```cedar file=docs/examples/… ````) is that file's text exactly,
any other ``cedar`` block is a policy Cedar and the schema accept, any other ``yaml`` block
catalog entities without a problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt

from core.catalog.descriptors import read_descriptor
from core.policy.rules import read_rules
from tests.support import docs

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "approvals.md"
SHOWN = ("opsgate catalog check", "opsgate catalog list", "opsgate catalog show",
         "opsgate policy check", "opsgate policy explain", "opsgate policy default",
         "opsgate serve")


@dataclass
class Block:
    """One fenced block: its language, its ``key=value`` tags, the doc line of its first line."""

    lang: str
    tags: dict[str, str]
    line: int
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def blocks(markdown: str) -> list[Block]:
    """The fenced blocks of ``markdown``, as CommonMark reads them."""
    found = []
    for token in MarkdownIt("commonmark").parse(markdown):
        if token.type != "fence" or not token.info.strip() or token.map is None:
            continue
        words = token.info.split()
        tags = dict(word.split("=", 1) for word in words[1:] if "=" in word)
        found.append(Block(words[0], tags, token.map[0] + 2, token.content.splitlines()))
    return found


@pytest.fixture(scope="module")
def doc_blocks() -> list[Block]:
    return blocks(DOC.read_text(encoding="utf-8"))


def test_it_shows_every_command_of_its_subject():
    shown = "\n".join(line for block in docs.page_blocks("docs/approvals.md")
                      if block.not_run is None for step in docs.steps(block)
                      if step.shown is not None for line in step.command)
    assert [name for name in SHOWN if f".venv/bin/{name}" not in shown] == []


def test_the_files_it_quotes_are_quoted_exactly(doc_blocks):
    quoted = [block for block in doc_blocks if "file" in block.tags]
    assert {block.tags["file"] for block in quoted} >= {
        "core/policy/opsgate.cedarschema", "core/policy/always.cedar",
        "docs/examples/policies/owners.cedar", "docs/examples/policies/freeze.cedar",
        "docs/examples/policies/no-scripts-in-production.cedar",
        "docs/examples/policies/staging-low-risk.cedar", "docs/examples/catalog/payments.yaml",
        "docs/examples/catalog/people.yaml", "docs/examples/catalog/search.yaml"}
    for block in quoted:
        actual = (ROOT / block.tags["file"]).read_text(encoding="utf-8")
        assert block.text == actual, f"docs/approvals.md:{block.line}: {block.tags['file']} " \
                                     "is not quoted as it is"


def test_its_other_policies_and_catalog_entities_are_valid(doc_blocks):
    for block in doc_blocks:
        if "file" in block.tags:
            continue
        where = f"docs/approvals.md:{block.line}"
        if block.lang == "cedar":
            read_rules([(where, block.text)])  # PolicyError names the problem
        elif block.lang == "yaml":
            for number, document in enumerate(yaml.safe_load_all(block.text), start=1):
                read = read_descriptor(document, where, number)
                assert read.entity is not None and not read.problems, \
                    [str(problem) for problem in read.problems]
