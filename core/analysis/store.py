"""Evidence rows of a case: written with the note that records them (one transaction): the
analyst's findings and the alerts Alertmanager sent; read by the librarian and the agent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict
from uuid import UUID

from sqlalchemy import Connection, Engine, insert, select

from core.analysis.tables import evidence_link
from core.db.database import connection
from core.db.tables import ops_case


class EvidenceRow(TypedDict):
    """One piece of evidence as ``evidence_link`` keeps it."""

    metric: str
    summary: str
    url: str | None
    data: dict[str, Any]


def write_evidence(conn: Connection, case_id: UUID, kind: str, rows: Sequence[EvidenceRow], *,
                   case_version: int | None = None) -> None:
    """One ``evidence_link`` row of ``kind`` per item, in the caller's transaction, at
    ``case_version`` (the case's current version when None)."""
    if not rows:
        return
    if case_version is None:
        case_version = conn.execute(select(ops_case.c.version).where(ops_case.c.id == case_id)
                                    ).scalar_one()
    conn.execute(insert(evidence_link), [
        {"case_id": case_id, "case_version": case_version, "kind": kind, **row}
        for row in rows])


def write_findings(conn: Connection, case_id: UUID, case_version: int,
                   findings: Sequence[dict[str, Any]]) -> None:
    """One ``evidence_link`` row per finding, in the caller's transaction."""
    write_evidence(conn, case_id, "finding", [
        {"metric": str(f["metric"]), "summary": str(f["summary"]), "url": f.get("link"),
         "data": dict(f)} for f in findings], case_version=case_version)


def case_findings(engine: Engine, case_id: UUID) -> list[dict[str, Any]]:
    """The findings recorded for a case, oldest first."""
    query = (select(evidence_link.c.data).where(evidence_link.c.case_id == case_id,
                                                evidence_link.c.kind == "finding")
             .order_by(evidence_link.c.id))
    with connection(engine) as conn:
        return [dict(data) for data in conn.execute(query).scalars()]
