"""docs/evidence.md holds itself to what it says under "Recall by meaning": every ``sh`` block is
run as a reader runs it (bash, ``set -e``, ``opsgate`` on PATH), in the page's order, against one
scratch SQLite library that starts with three verified cases embedded by the embedded model, and
what it prints on stdout is the ``text`` block under it, line for line, counts and seconds aside.
The page's Ollama address is replaced by a local OpenAI-compatible stub that answers with 768
dimensions, as ``nomic-embed-text`` does. A block whose first line says what it ``# needs:`` (a
cloud's CLI) is not run."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.library.embeddings import EmbeddedModel
from tests.support.library import library_file
from tests.support.openai_stub import embeddings_stub
from tests.support.processes import clean_env

DOC = Path(__file__).resolve().parents[3] / "docs" / "evidence.md"
SECTION = "## Recall by meaning"
OLLAMA = "http://127.0.0.1:11434/v1"
MAY_NEED = {"an Azure subscription and its CLI"}
NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Block:
    """A ``sh`` block of the page and the ``text`` block right under it (what it prints)."""

    script: str
    prints: list[str] | None

    @property
    def needs(self) -> str | None:
        first = self.script.splitlines()[0] if self.script else ""
        return first.removeprefix("# needs: ") if first.startswith("# needs: ") else None


def blocks(markdown: str) -> list[Block]:
    """The ``sh`` blocks of the page's "Recall by meaning" section, in order."""
    section = markdown[markdown.index(SECTION):]
    following = re.search(r"^## ", section[len(SECTION):], flags=re.MULTILINE)
    if following:
        section = section[:len(SECTION) + following.start()]
    fenced = re.findall(r"^```(\w*)\n(.*?)^```\s*$", section, flags=re.MULTILINE | re.DOTALL)
    found: list[Block] = []
    for n, (kind, body) in enumerate(fenced):
        if kind != "sh":
            continue
        after = fenced[n + 1] if n + 1 < len(fenced) else ("", "")
        prints = after[1].splitlines() if after[0] == "text" else None
        found.append(Block(body.rstrip("\n"), prints))
    return found


def run(block: Block, cwd: Path, replaced: Sequence[tuple[str, str]], **env: str) -> str:
    script = block.script
    for example, own in replaced:
        script = script.replace(example, own)
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=cwd,
                          env=clean_env(PATH=path, **env), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"docs/evidence.md:\n{block.script}\n{done.stdout}{done.stderr}"
    return done.stdout


def same_but_numbers(printed: str, shown: list[str]) -> bool:
    """Whether ``printed`` is ``shown`` line for line, any number standing for any other."""
    lines = printed.splitlines()
    patterns = ["".join(re.escape(part) + r"\d+(?:\.\d+)?" for part in NUMBER.split(line)[:-1])
                + re.escape(NUMBER.split(line)[-1]) for line in shown]
    return len(lines) == len(patterns) and all(
        re.fullmatch(pattern, line) for pattern, line in zip(patterns, lines, strict=True))


def test_the_sh_blocks_print_what_the_page_shows(tmp_path: Path) -> None:
    url = library_file(tmp_path)
    ran = 0
    with embeddings_stub(lambda texts: [v * 3 for v in EmbeddedModel().embed(texts)]) as (
            stub, server):
        for block in blocks(DOC.read_text()):
            if block.needs is not None:
                assert block.needs in MAY_NEED, block.script
                continue
            assert block.prints is not None, f"no text block shows what this prints:\n{block}"
            printed = run(block, tmp_path, [(OLLAMA, f"{server.base}/v1")],
                          OPSGATE_DATABASE_URL=url)
            assert same_but_numbers(printed, block.prints), (
                f"docs/evidence.md shows:\n{chr(10).join(block.prints)}\nit printed:\n{printed}")
            ran += 1
    assert ran >= 3
    assert {request["model"] for request in stub.requests} == {"nomic-embed-text"}


def test_the_doc_names_the_address_the_test_replaces() -> None:
    assert OLLAMA in DOC.read_text()


def test_numbers_aside_means_only_numbers() -> None:
    shown = ["reindexed 8 documents (29 passages) in 0.1 s"]
    assert same_but_numbers("reindexed 12 documents (40 passages) in 3.4 s\n", shown)
    assert not same_but_numbers("reindexed 12 documents (40 passages) in 3.4 s\nmore\n", shown)
    assert not same_but_numbers("reindexed 12 cases (40 passages) in 3.4 s\n", shown)
