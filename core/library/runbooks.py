"""Runbooks: the folder (``OPSGATE_RUNBOOKS_DIR``, resolved one way for every reader) and the one
runbook ranking, used by the ``runbooks`` case tool (the agent's and the MCP server's) and the
librarian's recall alike.

The ranking is deliberately simple (the words a query shares with a runbook, its title's words
counting twice; ties go to the file name): a folder holds tens of runbooks, and a person can
predict which one a query finds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Runbook:
    name: str  # the file's name without ``.md``
    title: str
    text: str
    path: str


class RunbookHit(TypedDict):
    runbook: str
    title: str
    path: str
    score: int
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


def load_runbooks(folder: Path) -> list[Runbook]:
    """Every ``*.md`` of ``folder`` (none when it does not exist), sorted by name."""
    if not folder.is_dir():
        return []
    books = []
    for path in sorted(folder.glob("*.md")):
        text = path.read_text("utf-8")
        books.append(Runbook(path.stem, runbook_title(text, path), text, str(path)))
    return books


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


def rank(query: str, books: Iterable[Runbook]) -> list[tuple[int, Runbook]]:
    """The runbooks sharing a word with ``query``, best first, each with its score."""
    wanted = words(query)
    scored = [(len(wanted & words(book.text)) + len(wanted & words(book.title)), book)
              for book in books]
    return sorted(((score, book) for score, book in scored if score),
                  key=lambda item: (-item[0], item[1].name))


def find_runbooks(folder: Path, query: str, limit: int = 3) -> list[RunbookHit]:
    """The ``limit`` runbooks of ``folder`` best matching ``query``, with the plan templates each
    names and an excerpt."""
    return [RunbookHit(runbook=book.name, title=book.title, path=book.path, score=score,
                       templates=list(dict.fromkeys(TEMPLATE.findall(book.text))),
                       excerpt=book.text[:EXCERPT_CHARS])
            for score, book in rank(query, load_runbooks(folder))[:limit]]
