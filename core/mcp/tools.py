"""The case tools opsgate offers over MCP and what each does on the case service.

Read tools answer from the case service and the library, within the principal's scope: a
principal scoped to channels sees, and writes to, only those channels' cases; any other case is
``NotFound`` as an unknown one. A write tool is read as an ``Intent``:
its business key (what makes two calls one intent), the normalized arguments the gateway
fingerprints, and the write itself, which ``core.mcp.server`` runs through the gateway. No tool
approves, rejects or executes a plan: a proposed plan waits at the gate for people.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from core.analysis.store import case_findings
from core.bootstrap import App
from core.cases.replies import Reply
from core.domain.commands import NoteCase, OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plans import plan_hash
from core.errors import NotFound, OpsgateError, Unavailable
from core.gateway import BusinessRefusal
from core.gateway.keys import normalized, text_key
from core.library import Library
from core.library.runbooks import find_runbooks, runbooks_folder
from core.mcp.schemas import (
    Args,
    CaseRef,
    FindingsArgs,
    ListArgs,
    NoteArgs,
    OpenCaseArgs,
    ProposePlanArgs,
    RunbookArgs,
    SimilarArgs,
    TimelineArgs,
)
from core.principals import Principal

T = TypeVar("T")

@dataclass(frozen=True)
class CaseTool:
    """One tool as listed: read tools are for every principal, write tools for operators."""

    name: str
    title: str
    description: str
    args: type[Args]
    writes: bool


TOOLS: tuple[CaseTool, ...] = (
    CaseTool("get_case", "Read a case", "One case: title, severity, status, version, the plan "
             "it last got and the analyst's findings.", CaseRef, writes=False),
    CaseTool("case_timeline", "Read a case's timeline", "The newest rows of a case's timeline "
             "(every move, refusal and note), oldest first.", TimelineArgs, writes=False),
    CaseTool("list_cases", "List cases", "Recent cases, newest first, optionally only those in "
             "one status.", ListArgs, writes=False),
    CaseTool("similar_cases", "Find similar past cases", "Closed cases most like a text or a "
             "case, with the plan that resolved each.", SimilarArgs, writes=False),
    CaseTool("runbooks", "Search runbooks", "The team's runbooks most relevant to a query, "
             "with an excerpt of each.", RunbookArgs, writes=False),
    CaseTool("open_case", "Open an incident case", "Open a case in NEW, once per business key "
             "(else per title): a repeat returns the first case.", OpenCaseArgs, writes=True),
    CaseTool("add_note", "Add a note to a case", "Record a note on a case's timeline, once per "
             "text; the case does not move.", NoteArgs, writes=True),
    CaseTool("record_findings", "Record findings", "Record what the investigation found; a case "
             "still ANALYZING moves on to PLANNING.", FindingsArgs, writes=True),
    CaseTool("propose_plan", "Propose a change plan", "Propose a ChangePlan for a case in "
             "PLANNING: it is schema-checked, then waits at the gate until people approve or "
             "reject it. No tool approves or executes a plan.", ProposePlanArgs, writes=True),
)
BY_NAME = {tool.name: tool for tool in TOOLS}


@dataclass(frozen=True)
class Intent:
    """A write as the gateway sees it: ``key`` names the intent, ``fingerprint`` is what must
    match on a repeat, ``run(service_key)`` makes the write (raising ``BusinessRefusal``)."""

    key: str
    fingerprint: dict[str, Any]
    run: Callable[[str], dict[str, Any]]


def reply_data(reply: Reply[T]) -> T:
    """A case-service reply's data; a refusal raises ``BusinessRefusal`` (stored and replayed
    by the gateway), an outage ``Unavailable`` (nothing stored: the caller may retry)."""
    try:
        return reply.data()
    except Unavailable:
        raise
    except OpsgateError as error:
        raise BusinessRefusal(error.message, code=error.code, **error.details) from error


def case_id_of(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError:
        raise NotFound(f"{raw!r} is not a case id") from None


class CaseTools:
    """The tools over one wired app: reads answer at once, writes are ``Intent``s."""

    def __init__(self, app: App, library: Library | None = None) -> None:
        self.app = app
        self.cases = app.cases
        self.library = library or Library(app.engine)

    # -- reads ----------------------------------------------------------------------------

    def in_scope(self, principal: Principal, args: Args) -> None:
        """Nothing when the case ``args`` name (if any) is one ``principal`` may see;
        ``NotFound``, as for an unknown case, when it lies outside its channels."""
        raw = getattr(args, "case_id", None)
        if raw is not None and principal.channels is not None:
            self.cases.get_case(case_id_of(str(raw)), channels=principal.channels)

    def read(self, name: str, principal: Principal, args: Args) -> dict[str, Any]:
        reader: Callable[[Principal, Any], dict[str, Any]] = getattr(self, f"_{name}")
        return reader(principal, args)

    def _get_case(self, principal: Principal, args: CaseRef) -> dict[str, Any]:
        case_id = case_id_of(args.case_id)
        case = self.cases.get_case(case_id, channels=principal.channels)
        proposed = self.cases.proposed_plan(case_id)
        plan = None if proposed is None else {
            "plan_hash": proposed["plan_hash"], "title": proposed["plan"].get("title"),
            "risk_score": proposed["plan"].get("risk_score"),
            "proposed_by": proposed["proposed_by"], "case_version": proposed["case_version"]}
        return {"case": case, "plan": plan, "findings": case_findings(self.app.engine, case_id)}

    def _case_timeline(self, principal: Principal, args: TimelineArgs) -> dict[str, Any]:
        case_id = case_id_of(args.case_id)
        timeline = self.cases.timeline(case_id, channels=principal.channels)
        return {"case_id": str(case_id), "timeline": timeline[-args.limit:]}

    def _list_cases(self, principal: Principal, args: ListArgs) -> dict[str, Any]:
        return {"cases": self.cases.list_cases(args.status, limit=args.limit,
                                               channels=principal.channels)}

    def _similar_cases(self, principal: Principal, args: SimilarArgs) -> dict[str, Any]:
        exclude = None if args.case_id is None else case_id_of(args.case_id)
        if args.query is not None:
            text = args.query
        elif exclude is not None:
            text = str(self.cases.get_case(exclude, channels=principal.channels)["title"])
        else:
            raise BusinessRefusal("give a query or a case_id", code="invalid_arguments")
        found = self.library.similar_cases(text, limit=args.limit, exclude=exclude)
        seen = self.cases.case_ids_in([UUID(str(c["case_id"])) for c in found],
                                      principal.channels)
        return {"cases": [{"case_id": c["case_id"], "title": c["title"],
                           "resolved_by": c["resolved_by"], "score": c["score"]}
                          for c in found if UUID(str(c["case_id"])) in seen]}

    def _runbooks(self, _principal: Principal, args: RunbookArgs) -> dict[str, Any]:
        folder = runbooks_folder(self.app.settings.runbooks_dir)
        hits = find_runbooks(folder, args.query, limit=args.limit)
        return {"runbooks": [{"title": hit["title"], "path": hit["path"], "score": hit["score"],
                              "excerpt": hit["excerpt"]} for hit in hits]}

    # -- writes ---------------------------------------------------------------------------

    def intent(self, name: str, principal: Principal, args: Args) -> Intent:
        planner: Callable[[Principal, Any], Intent] = getattr(self, f"_{name}")
        return planner(principal, args)

    def _open_case(self, principal: Principal, args: OpenCaseArgs) -> Intent:
        key = (f"business:{args.business_key}" if args.business_key
               else f"title:{text_key(args.title)}")

        def run(service_key: str) -> dict[str, Any]:
            cmd = OpenCase(title=args.title, actor=principal.actor, severity=args.severity,
                           attribution=attribution(principal))
            return {"case": reply_data(self.cases.open_case(cmd, service_key))}

        return Intent(key, {"title": normalized(args.title), "severity": args.severity,
                            "business_key": args.business_key}, run)

    def _add_note(self, principal: Principal, args: NoteArgs) -> Intent:
        case_id = case_id_of(args.case_id)

        def run(service_key: str) -> dict[str, Any]:
            note = NoteCase(case_id, "note", principal.actor, reason=args.text,
                            meta=attribution(principal))
            data = reply_data(self.cases.note(note, service_key))
            return {"case": _case_only(data), "note": data.get("note", "note")}

        return Intent(f"note:{case_id}:{text_key(args.text)}",
                      {"case_id": str(case_id), "text": normalized(args.text)}, run)

    def _record_findings(self, principal: Principal, args: FindingsArgs) -> Intent:
        case_id = case_id_of(args.case_id)

        def run(service_key: str) -> dict[str, Any]:
            if self.cases.get_case(case_id)["status"] == CaseStatus.ANALYZING:
                cmd = TransitionCase(case_id, CaseEvent.ANALYSIS_DONE, actor=principal.actor,
                                     reason=args.summary[:500], meta={"findings": args.summary},
                                     attribution=attribution(principal))
                return {"case": _case_only(reply_data(self.cases.transition(cmd, service_key)))}
            note = NoteCase(case_id, "findings", principal.actor, reason=args.summary[:500],
                            meta={"findings": args.summary, **attribution(principal)})
            return {"case": _case_only(reply_data(self.cases.note(note, service_key)))}

        return Intent(f"findings:{case_id}:{text_key(args.summary)}",
                      {"case_id": str(case_id), "summary": normalized(args.summary)}, run)

    def _propose_plan(self, principal: Principal, args: ProposePlanArgs) -> Intent:
        case_id = case_id_of(args.case_id)
        digest_ = plan_hash(args.plan)

        def run(service_key: str) -> dict[str, Any]:
            # The principal is the requester: the approval policy never lets them approve it.
            cmd = TransitionCase(case_id, CaseEvent.PLAN_READY, actor=principal.actor,
                                 plan=args.plan, requester=principal.actor,
                                 reason=f"plan proposed over MCP: {args.plan.get('title')}",
                                 attribution=attribution(principal))
            data = reply_data(self.cases.transition(cmd, service_key))
            return {"case": _case_only(data), "plan_hash": digest_,
                    "next": "waiting at the gate for people to approve or reject it"}

        key = f"plan:{case_id}:round{self.cases.planning_round(case_id)}:{digest_}"
        return Intent(key, {"case_id": str(case_id), "plan_hash": digest_}, run)


def attribution(principal: Principal) -> dict[str, str]:
    """What the timeline keeps beside the principal's actor: who, and that it came over MCP."""
    return {**principal.attribution(), "via": "mcp"}


def _case_only(data: Mapping[str, object]) -> dict[str, object]:
    """A case-service reply's case, without the extras a move or note adds."""
    keys = ("case_id", "tenant", "title", "severity", "status", "version", "created_at",
            "updated_at")
    return {key: data[key] for key in keys if key in data}
