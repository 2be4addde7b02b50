"""Evidence rows of a case: written with the note that records the findings (one transaction),
read by the librarian and the agent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Engine, insert, select

from core.analysis.tables import evidence_link
from core.db.database import connection


def write_findings(conn: Connection, case_id: UUID, case_version: int,
                   findings: Sequence[dict[str, Any]]) -> None:
    """One ``evidence_link`` row per finding, in the caller's transaction."""
    rows = [{"case_id": case_id, "case_version": case_version, "kind": "finding",
             "metric": str(f["metric"]), "summary": str(f["summary"]), "url": f.get("link"),
             "data": dict(f)} for f in findings]
    if rows:
        conn.execute(insert(evidence_link), rows)


def case_findings(engine: Engine, case_id: UUID) -> list[dict[str, Any]]:
    """The findings recorded for a case, oldest first."""
    query = (select(evidence_link.c.data).where(evidence_link.c.case_id == case_id,
                                                evidence_link.c.kind == "finding")
             .order_by(evidence_link.c.id))
    with connection(engine) as conn:
        return [dict(data) for data in conn.execute(query).scalars()]
