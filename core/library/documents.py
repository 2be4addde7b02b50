"""What the librarian indexes, as text: a CLOSED case (its title, findings, the plan that
worked and its verification) and a runbook (its sections), each a ``Document`` whose digest says
when it changed and whose passages are what is embedded."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, select

from core.analysis.tables import evidence_link
from core.cases.timeline import entry_of
from core.db import case_store
from core.domain.fsm import CaseStatus
from core.library.runbooks import runbook_title

CHUNK_CHARS = 1500  # a runbook section longer than this is cut at paragraph breaks


def passages_of(title: str, chunks: Sequence[str]) -> list[str]:
    """What is embedded of a document: its title, then each chunk."""
    return [title, *(chunk for chunk in chunks if chunk != title)]


@dataclass(frozen=True)
class Document:
    """What one indexed document says: ``chunks`` are searched, ``meta`` is handed back."""

    source: str
    kind: str
    title: str
    chunks: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        body = "\x1e".join([self.title, *self.chunks]).encode("utf-8")
        return hashlib.sha256(body).hexdigest()

    @property
    def passages(self) -> list[str]:
        """What is embedded: the title, then each chunk."""
        return passages_of(self.title, self.chunks)



def case_document(conn: Connection, case_id: UUID) -> Document | None:
    """A CLOSED case as a document: title, findings, the plan that worked and its
    verification; None when the case is not closed."""
    case = case_store.read_case(conn, case_id)
    if case is None or case["status"] != CaseStatus.CLOSED:
        return None
    plan_row = case_store.latest_plan(conn, case_id)
    plan: Mapping[str, Any] = {} if plan_row is None else plan_row["plan"]
    findings = [str(s) for s in conn.execute(
        select(evidence_link.c.summary).where(evidence_link.c.case_id == case_id)
        .order_by(evidence_link.c.id)).scalars()]
    timeline = case_store.read_timeline(conn, case_id)
    verification, stand_in = _verification(timeline), _closed_on_stand_in(timeline)
    series_read = not stand_in and _closed_on_series(timeline)
    steps = ", ".join(_step_words(step) for step in plan.get("steps", []))
    lines = [str(case["title"]), *(f"finding: {f}" for f in findings),
             f"resolved by: {plan.get('title', 'no plan')} ({steps})",
             f"{'not verified' if stand_in else 'verified'}: {verification}"]
    meta = {"case_id": str(case_id), "resolved_by": plan.get("title"),
            "plan_hash": None if plan_row is None else plan_row["plan_hash"],
            "verification": verification, "findings": findings,
            "severity": case["severity"], "stand_in": stand_in, "series_read": series_read}
    return Document(f"case:{case_id}", "case", str(case["title"]), ["\n".join(lines)], meta)


def _verification(timeline: Sequence[Mapping[Any, Any]]) -> str:
    for row in reversed(timeline):
        if row["event"] in ("verify_result", "verify_pass") and row["reason"]:
            return str(row["reason"])
    return "verified"


def _closed_on_stand_in(timeline: Sequence[Mapping[Any, Any]]) -> bool:
    """Whether the verdict that closed the case was read from a stand-in table."""
    for row in reversed(timeline):
        if row["event"] == "verify_result":
            return bool(entry_of(row).context.get("stand_in"))
    return False


def _closed_on_series(timeline: Sequence[Mapping[Any, Any]]) -> bool:
    """Whether the verdict that closed the case was read from the component's series (a probe,
    a query of no series, a case closed before readings recorded it: not)."""
    for row in reversed(timeline):
        if row["event"] == "verify_result":
            return bool(entry_of(row).context.get("series_read"))
    return False


def _step_words(step: Mapping[str, Any]) -> str:
    params = step.get("params") or {}
    named = [str(v) for k, v in sorted(params.items())
             if k in ("deployment", "service", "target", "argv", "url", "to")]
    return " ".join([str(step.get("action", "")), *named])


def runbook_document(path: Path) -> Document:
    """A runbook: its first heading is its title; each section (``##``) is a chunk, long
    sections cut at paragraph breaks."""
    text = path.read_text(encoding="utf-8")
    title = runbook_title(text, path)
    sections = [s.strip() for s in re.split(r"^(?=##\s)", text, flags=re.MULTILINE)]
    chunks = [piece for section in sections if section for piece in _cut(section)]
    return Document(f"runbook:{path.name}", "runbook", title, chunks or [title],
                    {"path": str(path), "file": path.name})


def _cut(section: str) -> list[str]:
    pieces: list[str] = []
    current = ""
    for paragraph in section.split("\n\n"):
        if current and len(current) + len(paragraph) > CHUNK_CHARS:
            pieces.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    return [*pieces, current] if current else pieces
