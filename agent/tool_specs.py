"""The tools the model may call, and nothing else: their argument models and the OpenAI
function specs bound to the model. There is no tool that executes or approves a plan."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.domain.commands import SEVERITIES
from core.domain.fsm import CaseStatus
from core.domain.plans import plan_schema


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class GetCase(_Args):
    case_id: str = Field(description="The case id (a UUID).")


class ListCases(_Args):
    status: CaseStatus | None = Field(default=None, description="Only cases in this status.")


class GetTimeline(_Args):
    case_id: str


class SearchRunbooks(_Args):
    query: str = Field(min_length=1, max_length=500)


class OpenCaseArgs(_Args):
    title: str = Field(min_length=1, max_length=200)
    severity: Literal["SEV1", "SEV2", "SEV3", "SEV4"] = "SEV3"
    business_key: str | None = Field(
        default=None, max_length=200,
        description="What makes this incident one incident (an alert fingerprint); repeats "
        "with the same key return the first case.")


class RecordFindings(_Args):
    case_id: str
    summary: str = Field(min_length=1, max_length=4000)


class ProposePlan(_Args):
    case_id: str
    plan: dict[str, Any] = Field(description="A ChangePlan (see its JSON Schema).")


class PostUpdate(_Args):
    case_id: str
    text: str = Field(min_length=1, max_length=2000)


READ_ONLY: dict[str, type[_Args]] = {
    "get_case": GetCase, "list_cases": ListCases, "get_timeline": GetTimeline,
    "search_runbooks": SearchRunbooks,
}
SIDE_EFFECTING: dict[str, type[_Args]] = {
    "open_case": OpenCaseArgs, "record_findings": RecordFindings, "propose_plan": ProposePlan,
    "post_update": PostUpdate,
}
ARGS: dict[str, type[_Args]] = {**READ_ONLY, **SIDE_EFFECTING}
# The Literal above must list the core's severities; a new one there must be added here.
assert set(SEVERITIES) == {"SEV1", "SEV2", "SEV3", "SEV4"}, "OpenCaseArgs.severity is stale"

DESCRIPTIONS = {
    "get_case": "Read one case: title, severity, status, version.",
    "list_cases": "List recent cases, optionally only those in one status.",
    "get_timeline": "Read a case's timeline: every transition and note, oldest first.",
    "search_runbooks": "Search the team's Markdown runbooks; returns titles and excerpts.",
    "open_case": "Open a new incident case (once per business key or title).",
    "record_findings": "Record what the investigation found on this case (ends ANALYZING).",
    "propose_plan": "Propose a ChangePlan for this case; it is schema-checked and then waits "
                    "for human approval. You cannot approve or execute it.",
    "post_update": "Post a short update in this case's chat thread.",
}


def _parameters(name: str) -> dict[str, Any]:
    schema = ARGS[name].model_json_schema()
    schema.pop("title", None)
    if name == "propose_plan":
        contract = plan_schema()
        schema["properties"]["plan"] = {k: v for k, v in contract.items()
                                        if k not in ("$schema", "$id", "$defs")}
        # its "#/$defs/…" references resolve against the root of the parameters
        schema["$defs"] = {**schema.get("$defs", {}), **contract["$defs"]}
    return schema


def tool_specs() -> list[dict[str, Any]]:
    """The OpenAI function specs of every tool, in a stable order."""
    return [{"type": "function",
             "function": {"name": name, "description": DESCRIPTIONS[name],
                          "parameters": _parameters(name)}}
            for name in ARGS]
