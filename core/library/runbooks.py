"""The runbooks folder (``OPSGATE_RUNBOOKS_DIR``, resolved one way for every reader) and the
runbook search the agent's and the MCP server's tools answer with: the library's full-text
search over that folder, each hit with the plan templates the runbook names and an excerpt."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypedDict

from core.library.library import Library

TEMPLATE = re.compile(r"plan template `([a-z0-9_.-]+)`")
EXCERPT_CHARS = 600
SOURCE_TREE = Path(__file__).resolve().parents[2]
SCANNED = 100  # ranked runbooks looked at before keeping the folder's: a folder holds tens


class RunbookHit(TypedDict):
    runbook: str  # the file's name without ``.md``
    title: str
    path: str
    score: float
    templates: list[str]  # the catalog templates it names (``plan template `name` ``)
    excerpt: str


def runbooks_folder(configured: str) -> Path:
    """``OPSGATE_RUNBOOKS_DIR``; a relative folder missing from the working directory is looked
    up in the source tree, so the shipped runbooks work from any directory (``opsgate mcp`` is
    started from wherever a desktop app likes)."""
    folder = Path(configured)
    if folder.is_absolute() or folder.is_dir():
        return folder
    shipped = SOURCE_TREE / folder
    return shipped if shipped.is_dir() else folder


def find_runbooks(library: Library, folder: Path, query: str, limit: int = 3) -> list[RunbookHit]:
    """The ``limit`` runbooks of ``folder`` best matching ``query``, best first. The folder is
    indexed first (an unchanged runbook writes nothing); a runbook the library still holds but
    the folder no longer does (removed, or from another folder) is not offered."""
    library.index_runbooks(folder)
    held = {path.name for path in folder.glob("*.md")} if folder.is_dir() else set()
    found = [hit for hit in library.relevant_runbooks(query, limit=SCANNED)
             if Path(str(hit["path"])).name in held]
    return [_hit(hit["title"], Path(str(hit["path"])), float(hit["score"]))
            for hit in found[:limit]]


def _hit(title: str, path: Path, score: float) -> RunbookHit:
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError):  # indexed, then removed or replaced
        text = ""
    return RunbookHit(runbook=path.stem, title=title, path=str(path), score=score,
                      templates=list(dict.fromkeys(TEMPLATE.findall(text))),
                      excerpt=text[:EXCERPT_CHARS])
