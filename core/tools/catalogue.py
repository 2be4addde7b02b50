"""The one catalogue of case tools: each tool's name, argument model, intent, business key and
whether it reads or writes; and ``route``, which ties a tool to a typed handler.

The agent (``agent.tool_specs``, ``agent.tools``) and the MCP server (``core.mcp``) offer these
tools under these names, each answering in its own way. A write's ``IntentKey`` names what makes
two calls one intent (the business key) and what must match on a repeat (the fingerprint the
gateway keeps); no tool approves, rejects or executes a plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

from core.domain.plans import plan_hash
from core.gateway.keys import normalized, text_key
from core.tools.args import (
    Args,
    CaseRef,
    ComponentsArgs,
    FindingsArgs,
    ListArgs,
    NoteArgs,
    OpenCaseArgs,
    ProposePlanArgs,
    RunbookArgs,
    SimilarArgs,
    TimelineArgs,
    case_id_of,
)

A = TypeVar("A", bound=Args)
P = TypeVar("P")
R = TypeVar("R")


class Access(StrEnum):
    READ = "read"
    WRITE = "write"


class Rounds(Protocol):
    """What a business key may need from the case service: the case's planning round."""

    def planning_round(self, case_id: UUID) -> int: ...


@dataclass(frozen=True)
class IntentKey:
    """A write as the gateway sees it: ``key`` names the intent, ``fingerprint`` (the
    normalized arguments) must match on a repeat under the same key."""

    key: str
    fingerprint: dict[str, Any]


@dataclass(frozen=True)
class CaseTool(Generic[A]):
    """One tool: its arguments, what it is for, and (for a write) its intent."""

    name: str
    title: str
    description: str
    args: type[A]
    access: Access
    intent: Callable[[A, Rounds], IntentKey] | None = None

    @property
    def writes(self) -> bool:
        return self.access is Access.WRITE

    def parse(self, raw: Mapping[str, Any]) -> A:
        """The arguments as this tool's model; pydantic's ``ValidationError`` when they are not."""
        return self.args.model_validate(dict(raw))

    def intent_of(self, args: A, rounds: Rounds) -> IntentKey:
        if self.intent is None:
            raise TypeError(f"{self.name} reads; it has no intent")
        return self.intent(args, rounds)


# -- the intents of the writes -------------------------------------------------------------------

def _open_case(args: OpenCaseArgs, _rounds: Rounds) -> IntentKey:
    key = (f"business:{args.business_key}" if args.business_key
           else f"title:{text_key(args.title)}")
    return IntentKey(key, {"title": normalized(args.title), "severity": args.severity,
                           "business_key": args.business_key})


def _add_note(args: NoteArgs, _rounds: Rounds) -> IntentKey:
    case_id = case_id_of(args.case_id)
    return IntentKey(f"note:{case_id}:{text_key(args.text)}",
                     {"case_id": str(case_id), "text": normalized(args.text)})


def _record_findings(args: FindingsArgs, _rounds: Rounds) -> IntentKey:
    case_id = case_id_of(args.case_id)
    return IntentKey(f"findings:{case_id}:{text_key(args.summary)}",
                     {"case_id": str(case_id), "summary": normalized(args.summary)})


def _name_components(args: ComponentsArgs, _rounds: Rounds) -> IntentKey:
    case_id = case_id_of(args.case_id)
    names = sorted(dict.fromkeys(args.components))
    return IntentKey(f"components:{case_id}:{','.join(names)}",
                     {"case_id": str(case_id), "components": names})


def _propose_plan(args: ProposePlanArgs, rounds: Rounds) -> IntentKey:
    """The same plan proposed again in the same planning round is one intent; after PARKED →
    resume it is a new one."""
    case_id = case_id_of(args.case_id)
    digest = plan_hash(args.plan)
    return IntentKey(f"plan:{case_id}:round{rounds.planning_round(case_id)}:{digest}",
                     {"case_id": str(case_id), "plan_hash": digest})


# -- the catalogue ---------------------------------------------------------------------------------

GET_CASE = CaseTool("get_case", "Read a case", "One case: title, severity, status, version, the "
                    "plan it last got and the analyst's findings.", CaseRef, Access.READ)
CASE_TIMELINE = CaseTool("case_timeline", "Read a case's timeline", "The newest rows of a case's "
                         "timeline (every move, refusal and note), oldest first.", TimelineArgs,
                         Access.READ)
LIST_CASES = CaseTool("list_cases", "List cases", "Recent cases, newest first, optionally only "
                      "those in one status.", ListArgs, Access.READ)
SIMILAR_CASES = CaseTool("similar_cases", "Find similar past cases", "Closed cases most like a "
                         "text or a case, with the plan that resolved each.", SimilarArgs,
                         Access.READ)
RUNBOOKS = CaseTool("runbooks", "Search runbooks", "The team's runbooks most relevant to a query, "
                    "with an excerpt of each.", RunbookArgs, Access.READ)
OPEN_CASE = CaseTool("open_case", "Open an incident case", "Open a case in NEW, once per business "
                     "key (else per title): a repeat returns the first case.", OpenCaseArgs,
                     Access.WRITE, _open_case)
ADD_NOTE = CaseTool("add_note", "Add a note to a case", "Record a note on a case's timeline, once "
                    "per text; the case does not move.", NoteArgs, Access.WRITE, _add_note)
RECORD_FINDINGS = CaseTool("record_findings", "Record findings", "Record what the investigation "
                           "found; a case still ANALYZING moves on to PLANNING.", FindingsArgs,
                           Access.WRITE, _record_findings)
PROPOSE_PLAN = CaseTool("propose_plan", "Propose a change plan", "Propose a ChangePlan for a case "
                        "in PLANNING: it is schema-checked, then waits at the gate until people "
                        "approve or reject it. No tool approves or executes a plan.",
                        ProposePlanArgs, Access.WRITE, _propose_plan)

NAME_COMPONENTS = CaseTool("name_components", "Name the case's components", "Name the catalog "
                           "components a case concerns, before any plan reaches the gate: the "
                           "approval policy reads their owners. Once per case.", ComponentsArgs,
                           Access.WRITE, _name_components)
"""The agent's alone (not on the MCP server): who a case concerns is said over REST there."""

TOOLS: tuple[CaseTool[Any], ...] = (GET_CASE, CASE_TIMELINE, LIST_CASES, SIMILAR_CASES, RUNBOOKS,
                                    OPEN_CASE, ADD_NOTE, RECORD_FINDINGS, PROPOSE_PLAN)
BY_NAME: dict[str, CaseTool[Any]] = {tool.name: tool for tool in TOOLS}


# -- typed dispatch --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Route(Generic[P, R]):
    """A tool and its handler: ``run(context, args)`` with the tool's own argument model."""

    tool: CaseTool[Any]
    run: Callable[[P, Args], R]


def route(tool: CaseTool[A], handler: Callable[[P, A], R]) -> Route[P, R]:
    """``handler`` as the answer to ``tool``; arguments of another tool's model are a bug."""

    def run(context: P, args: Args) -> R:
        if not isinstance(args, tool.args):
            raise TypeError(f"{tool.name} takes {tool.args.__name__}, not {type(args).__name__}")
        return handler(context, args)

    return Route(tool, run)


def routes(*each: Route[P, R]) -> dict[str, Route[P, R]]:
    """A surface's dispatch table, by tool name."""
    return {one.tool.name: one for one in each}
