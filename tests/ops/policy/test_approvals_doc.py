"""docs/approvals.md as written. Its ``console`` blocks run in order, in one bash, in a scratch
folder holding a copy of docs/examples: the lines under each ``$ `` command are what it prints
(stdout and stderr together; ``…`` stands for what varies). Its ``sh`` blocks run there too, as
the reader's setup. A block tagged ``file=PATH`` (```` ```cedar file=docs/examples/… ````) is
that file's text exactly; any other ``cedar`` block is a policy Cedar and the schema accept, any
other ``yaml`` block catalog entities without a problem.

``opsgate`` is the real console script; no OPSGATE_* variable of the caller's reaches it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt

from core.catalog.descriptors import read_descriptor
from core.policy.rules import read_rules
from tests.support.processes import clean_env, command

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "approvals.md"
DEADLINE_S = 300.0
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


@dataclass
class Step:
    """A ``$ `` command of a console block (continued by lines after a trailing backslash),
    the output shown under it, and the doc line it starts on; or an ``sh`` block as setup."""

    line: int
    command: list[str]
    expected: list[str] | None  # None: setup, whatever it prints


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


def steps(found: list[Block]) -> list[Step]:
    result: list[Step] = []
    for block in found:
        if block.lang == "sh":
            result.append(Step(block.line, block.lines, None))
            continue
        if block.lang != "console":
            continue
        step: Step | None = None
        continued = False
        for offset, line in enumerate(block.lines):
            if continued and step is not None:
                step.command.append(line)
            elif line.startswith("$ "):
                step = Step(block.line + offset, [line[2:]], [])
                result.append(step)
            else:
                assert step is not None and step.expected is not None, \
                    f"docs/approvals.md:{block.line + offset}: output before any `$ ` command"
                step.expected.append(line)
            continued = line.endswith("\\")
    return result


def script(all_steps: list[Step], out: Path) -> str:
    """The steps as one bash script: each one's output to ``<n>``, its status to ``<n>.rc``,
    and ``$?`` left as the step left it, so a shown ``echo $?`` reads the step before."""
    parts = []
    for n, step in enumerate(all_steps):
        body = "\n".join(step.command)
        parts.append(f'{{\n{body}\n}} > "{out}/{n}" 2>&1\n__rc=$?; echo $__rc > "{out}/{n}.rc"; '
                     "(exit $__rc)")
    return "\n".join(parts) + "\n"


def matches(expected: list[str], got: list[str]) -> bool:
    if len(expected) != len(got):
        return False
    for want, have in zip(expected, got, strict=True):
        pattern = ".*".join(re.escape(part) for part in want.rstrip().split("…"))
        if not re.fullmatch(pattern, have.rstrip()):
            return False
    return True


@pytest.fixture(scope="module")
def doc_blocks() -> list[Block]:
    return blocks(DOC.read_text(encoding="utf-8"))


def test_the_commands_it_shows_print_what_it_says(doc_blocks, tmp_path):
    all_steps = steps(doc_blocks)
    shown = "\n".join(line for step in all_steps if step.expected is not None
                      for line in step.command)
    assert [name for name in SHOWN if name not in shown] == []
    work, out, bin_dir = tmp_path / "work", tmp_path / "out", tmp_path / "bin"
    for folder in (work, out, bin_dir):
        folder.mkdir()
    shutil.copytree(ROOT / "docs" / "examples", work / "docs" / "examples")
    wrapper = bin_dir / "opsgate"  # as a reader's shell finds it, not a shell function
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(command())} "$@"\n')
    wrapper.chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    (tmp_path / "doc.sh").write_text(script(all_steps, out))
    runner = subprocess.Popen(["bash", str(tmp_path / "doc.sh")], cwd=work, env=env,
                              start_new_session=True)
    try:
        runner.wait(timeout=DEADLINE_S)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
    problems = []
    for n, step in enumerate(all_steps):
        got = (out / str(n)).read_text(errors="replace").rstrip("\n").split("\n") \
            if (out / str(n)).exists() else ["(did not run)"]
        got = [] if got == [""] else got
        if step.expected is None:
            rc = (out / f"{n}.rc").read_text().strip() if (out / f"{n}.rc").exists() else "?"
            if rc != "0":
                problems.append(f"docs/approvals.md:{step.line}: the sh block exited {rc}:\n"
                                + "\n".join(got))
            continue
        expected = list(step.expected)
        while expected and not expected[-1].strip():
            expected.pop()
        if not matches(expected, got):
            problems.append(f"docs/approvals.md:{step.line}: $ {' '.join(step.command)}\n"
                            "--- the doc says\n" + "\n".join(expected)
                            + "\n--- it printed\n" + "\n".join(got))
    assert not problems, "\n\n".join(problems)


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
