"""``search_runbooks``: ranks the Markdown runbooks of a folder by the query's words.

Deliberately simple (word overlap, title words count double): the folder holds tens of files.
The folder is ``core.library.runbooks.runbooks_folder``'s, as for every other reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

WORD = re.compile(r"[a-z0-9]+")
TEMPLATE = re.compile(r"plan template `([a-z0-9_.-]+)`")
STOP = frozenset({"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is",
                  "it", "of", "on", "or", "the", "to", "with"})
EXCERPT_CHARS = 600


@dataclass(frozen=True)
class Runbook:
    name: str
    title: str
    text: str


class RunbookHit(TypedDict):
    runbook: str
    title: str
    score: int
    templates: list[str]
    excerpt: str


def words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP and len(w) > 1}


def load_runbooks(folder: Path) -> list[Runbook]:
    """Every ``*.md`` under ``folder`` (none when it does not exist), sorted by name."""
    if not folder.is_dir():
        return []
    books = []
    for path in sorted(folder.glob("*.md")):
        text = path.read_text("utf-8")
        first = next((line for line in text.splitlines() if line.strip()), path.stem)
        books.append(Runbook(path.stem, first.lstrip("# ").strip(), text))
    return books


def search_runbooks(folder: Path, query: str, limit: int = 3) -> list[RunbookHit]:
    """The best ``limit`` runbooks for ``query``: name, title, score, the plan templates the
    runbook names (``plan template `name` ``) and an excerpt."""
    wanted = words(query)
    scored = []
    for book in load_runbooks(folder):
        score = len(wanted & words(book.text)) + len(wanted & words(book.title))
        if score:
            scored.append((score, book))
    scored.sort(key=lambda item: (-item[0], item[1].name))
    return [RunbookHit(runbook=book.name, title=book.title, score=score,
                       templates=list(dict.fromkeys(TEMPLATE.findall(book.text))),
                       excerpt=book.text[:EXCERPT_CHARS]) for score, book in scored[:limit]]
