"""What each case tool gives over MCP: the JSON Schema of its structured result (the output
schema clients validate against). What each takes is the catalogue's (``core.tools.args``)."""

from __future__ import annotations

from typing import Any

from core.domain.fsm import CaseStatus


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


_TEXT = {"type": "string"}
_NULLABLE_TEXT = {"type": ["string", "null"]}
CASE = _object({"case_id": _TEXT, "tenant": _TEXT, "title": _TEXT, "severity": _TEXT,
                "status": {"enum": [str(s) for s in CaseStatus]}, "version": {"type": "integer"},
                "created_at": _TEXT, "updated_at": _TEXT},
               "case_id", "title", "severity", "status", "version")
PLAN = _object({"plan_hash": _TEXT, "title": _TEXT, "risk_score": {"type": ["number", "null"]},
                "proposed_by": _TEXT, "case_version": {"type": "integer"}},
               "plan_hash", "title")
TIMELINE_ROW = _object({"id": {"type": "integer"}, "event": _TEXT, "actor": _TEXT,
                        "reason": _NULLABLE_TEXT, "meta": {"type": ["object", "null"]},
                        "created_at": _TEXT}, "event", "actor", "created_at")

OUTPUTS: dict[str, dict[str, Any]] = {
    "get_case": _object({"case": CASE, "plan": {"anyOf": [PLAN, {"type": "null"}]},
                         "findings": {"type": "array", "items": {"type": "object"}}},
                        "case", "plan", "findings"),
    "case_timeline": _object({"case_id": _TEXT,
                              "timeline": {"type": "array", "items": TIMELINE_ROW}},
                             "case_id", "timeline"),
    "list_cases": _object({"cases": {"type": "array", "items": CASE}}, "cases"),
    "similar_cases": _object({"cases": {"type": "array", "items": _object(
        {"case_id": _TEXT, "title": _TEXT, "resolved_by": _NULLABLE_TEXT,
         "score": {"type": "number"}}, "case_id", "title")}}, "cases"),
    "runbooks": _object({"runbooks": {"type": "array", "items": _object(
        {"title": _TEXT, "path": _NULLABLE_TEXT, "score": {"type": "number"},
         "excerpt": _TEXT}, "title", "excerpt")}}, "runbooks"),
    "open_case": _object({"case": CASE}, "case"),
    "add_note": _object({"case": CASE, "note": _TEXT}, "case", "note"),
    "record_findings": _object({"case": CASE}, "case"),
    "propose_plan": _object({"case": CASE, "plan_hash": _TEXT, "next": _TEXT},
                            "case", "plan_hash", "next"),
}
