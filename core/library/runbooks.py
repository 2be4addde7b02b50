"""Runbooks: the folder (``OPSGATE_RUNBOOKS_DIR``, resolved one way for every reader), what a
runbook says (its title, the plan templates it names) and the words a search matches on. They
are ranked by the librarian's one ranking (``Library.find_runbooks``, ``core.library.hybrid``),
for the ``runbooks`` case tool (the agent's and the MCP server's) and recall alike.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypedDict

WORD = re.compile(r"[a-z0-9]+")
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")
HEADING = re.compile(r"^#\s+(.+)$", re.MULTILINE)
TEMPLATE = re.compile(r"plan template `([a-z0-9_.-]+)`")
STOP = frozenset({"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is",
                  "it", "of", "on", "or", "the", "to", "with"})
EXCERPT_CHARS = 600
SOURCE_TREE = Path(__file__).resolve().parents[2]
DEFAULT_FOLDER = Path("docs/runbooks")
SHIPPED = Path(__file__).resolve().with_name("shipped_runbooks")
"""docs/runbooks as the wheel carries it (pyproject.toml): an installed opsgate (the image) has
no source tree."""


class RunbookHit(TypedDict):
    runbook: str
    title: str
    path: str
    score: float
    templates: list[str]  # the catalog templates it names (``plan template `name` ``)
    excerpt: str


def runbooks_folder(configured: str) -> Path:
    """``OPSGATE_RUNBOOKS_DIR``; a relative folder missing from the working directory is looked
    up in the source tree, so the shipped runbooks work from any directory (``opsgate mcp`` is
    started from wherever a desktop app likes), and the default one in the installed package
    when there is no source tree (the image)."""
    folder = Path(configured)
    if folder.is_absolute() or folder.is_dir():
        return folder
    in_tree = SOURCE_TREE / folder
    if in_tree.is_dir():
        return in_tree
    return SHIPPED if folder == DEFAULT_FOLDER and SHIPPED.is_dir() else folder


def runbook_title(text: str, path: Path) -> str:
    """A runbook's first ``#`` heading, or its file name in words."""
    heading = HEADING.search(text)
    return heading.group(1).strip() if heading else path.stem.replace("-", " ")


def _singular(word: str) -> str:
    """``services`` and ``service`` are one word to a search (a plural's ``s`` goes)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") \
        else word


def words(text: str) -> set[str]:
    """The words of ``text`` a search matches on: Latin words (singular) and digits, each pair of
    neighbouring characters in a run of CJK text (Chinese is written without spaces)."""
    lowered = text.lower()
    latin = {_singular(w) for w in WORD.findall(lowered) if w not in STOP and len(w) > 1}
    return latin | {run[i:i + 2] for run in CJK.findall(lowered) for i in range(len(run) - 1)}
