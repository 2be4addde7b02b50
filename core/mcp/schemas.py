"""What each case tool takes and gives over MCP: its argument model (the input schema) and the
JSON Schema of its structured result (the output schema clients validate against)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.domain.commands import SEVERITIES
from core.domain.fsm import CaseStatus
from core.domain.plans import plan_schema

Severity = Literal["SEV1", "SEV2", "SEV3", "SEV4"]
assert set(SEVERITIES) == {"SEV1", "SEV2", "SEV3", "SEV4"}, "Severity is stale"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class CaseRef(Args):
    case_id: str = Field(description="The case id (a UUID).")


class TimelineArgs(CaseRef):
    limit: int = Field(default=50, ge=1, le=500, description="The newest rows at most.")


class ListArgs(Args):
    status: CaseStatus | None = Field(default=None, description="Only cases in this status.")
    limit: int = Field(default=20, ge=1, le=200)


class SimilarArgs(Args):
    query: str | None = Field(default=None, min_length=1, max_length=500,
                              description="What the incident looks like (a title, symptoms).")
    case_id: str | None = Field(default=None, description="Or: cases like this case's title.")
    limit: int = Field(default=3, ge=1, le=20)


class RunbookArgs(Args):
    query: str = Field(min_length=1, max_length=500)
    limit: int = Field(default=3, ge=1, le=20)


class OpenCaseArgs(Args):
    title: str = Field(min_length=1, max_length=200)
    severity: Severity = "SEV3"
    business_key: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="What makes this incident one incident (an alert fingerprint, a ticket "
        "id). Without one the title is the key: the same title again returns the first case.")


class NoteArgs(CaseRef):
    text: str = Field(min_length=1, max_length=4000)


class FindingsArgs(CaseRef):
    summary: str = Field(min_length=1, max_length=4000)


class ProposePlanArgs(CaseRef):
    plan: dict[str, Any] = Field(description="A ChangePlan (see its JSON Schema).")


def input_schema(model: type[Args]) -> dict[str, Any]:
    """The tool's input schema; ``plan`` is the ChangePlan contract itself."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    if "plan" in schema.get("properties", {}):
        contract = plan_schema()
        schema["properties"]["plan"] = {k: v for k, v in contract.items()
                                        if k not in ("$schema", "$id", "$defs")}
        # its "#/$defs/…" references resolve against the root of the input schema
        schema["$defs"] = {**schema.get("$defs", {}), **contract["$defs"]}
    return schema


# -- output schemas ----------------------------------------------------------------------------

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
