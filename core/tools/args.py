"""What each case tool takes: one pydantic argument model per tool, and its JSON Schema (the
``plan`` argument is the ChangePlan contract itself)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from core.domain.commands import SEVERITIES
from core.domain.fsm import CaseStatus
from core.domain.plans import plan_schema
from core.errors import NotFound

Severity = Literal["SEV1", "SEV2", "SEV3", "SEV4"]
# The Literal above must list the core's severities; a new one there must be added here.
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
        default=None, max_length=200,
        description="What makes this incident one incident (an alert fingerprint, a ticket "
        "id). Without one the title is the key: the same title again returns the first case.")


class NoteArgs(CaseRef):
    text: str = Field(min_length=1, max_length=4000)


class ComponentsArgs(CaseRef):
    components: list[Annotated[str, Field(min_length=1, max_length=63)]] = Field(
        min_length=1, max_length=10,
        description="Catalog component names the case concerns, e.g. [\"payments-api\"].")


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


def case_id_of(raw: str) -> UUID:
    """A tool's ``case_id`` argument as a case id; ``NotFound`` when it is not one."""
    try:
        return UUID(raw)
    except ValueError:
        raise NotFound(f"{raw!r} is not a case id") from None
