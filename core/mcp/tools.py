"""What each case tool of the catalogue (``core.tools``) does over MCP, on the case service.

Read tools answer from the case service and the library, within the principal's scope: a
principal scoped to channels sees, and writes to, only those channels' cases; any other case is
``NotFound`` as an unknown one. A write tool is read as an ``Intent``: the catalogue's business
key and fingerprint, and the write itself, which ``core.mcp.server`` runs through the gateway.
No tool approves, rejects or executes a plan: a proposed plan waits at the gate for people.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from core.analysis.store import case_findings
from core.bootstrap import App
from core.domain.commands import NoteCase, OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plans import plan_hash
from core.gateway import BusinessRefusal, reply_data
from core.library import Library
from core.library.runbooks import runbooks_folder
from core.principals import Principal
from core.tools.args import (
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
    case_id_of,
)
from core.tools.catalogue import (
    ADD_NOTE,
    CASE_TIMELINE,
    GET_CASE,
    LIST_CASES,
    OPEN_CASE,
    PROPOSE_PLAN,
    RECORD_FINDINGS,
    RUNBOOKS,
    SIMILAR_CASES,
    CaseTool,
    IntentKey,
    route,
    routes,
)

Write = Callable[[str], dict[str, Any]]


@dataclass(frozen=True)
class Intent:
    """A write as the gateway sees it: ``key`` names the intent, ``fingerprint`` is what must
    match on a repeat, ``run(service_key)`` makes the write (raising ``BusinessRefusal``)."""

    key: str
    fingerprint: dict[str, Any]
    run: Write


class CaseTools:
    """The tools over one wired app: reads answer at once, writes are ``Intent``s."""

    def __init__(self, app: App, library: Library | None = None) -> None:
        self.app = app
        self.cases = app.cases
        self.library = library or app.library
        self._reads = routes(route(GET_CASE, self._get_case),
                             route(CASE_TIMELINE, self._case_timeline),
                             route(LIST_CASES, self._list_cases),
                             route(SIMILAR_CASES, self._similar_cases),
                             route(RUNBOOKS, self._runbooks))
        self._writes = routes(route(OPEN_CASE, self._open_case),
                              route(ADD_NOTE, self._add_note),
                              route(RECORD_FINDINGS, self._record_findings),
                              route(PROPOSE_PLAN, self._propose_plan))

    # -- reads ----------------------------------------------------------------------------

    def in_scope(self, principal: Principal, args: Args) -> None:
        """Nothing when the case ``args`` name (if any) is one ``principal`` may see;
        ``NotFound``, as for an unknown case, when it lies outside its channels."""
        raw = getattr(args, "case_id", None)
        if raw is not None and principal.channels is not None:
            self.cases.get_case(case_id_of(str(raw)), channels=principal.channels)

    def read(self, tool: CaseTool[Any], principal: Principal, args: Args) -> dict[str, Any]:
        return self._reads[tool.name].run(principal, args)

    def _get_case(self, principal: Principal, args: CaseRef) -> dict[str, Any]:
        case_id = case_id_of(args.case_id)
        progress = self.cases.progress(case_id, channels=principal.channels)
        current = progress.plan
        plan = None if current is None else {
            "plan_hash": current.plan_hash, "title": current.plan.get("title"),
            "risk_score": current.risk_score, "proposed_by": current.proposed_by,
            "case_version": current.case_version}
        return {"case": progress.case, "plan": plan,
                "findings": case_findings(self.app.engine, case_id)}

    def _case_timeline(self, principal: Principal, args: TimelineArgs) -> dict[str, Any]:
        case_id = case_id_of(args.case_id)
        timeline, _ = self.cases.timeline_tail(case_id, args.limit, channels=principal.channels)
        return {"case_id": str(case_id), "timeline": timeline}

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
        hits = self.library.find_runbooks(folder, args.query, limit=args.limit)
        return {"runbooks": [{"title": hit["title"], "path": hit["path"], "score": hit["score"],
                              "excerpt": hit["excerpt"]} for hit in hits]}

    # -- writes ---------------------------------------------------------------------------

    def intent(self, tool: CaseTool[Any], principal: Principal, args: Args) -> Intent:
        """The write ``args`` ask for: the catalogue's key and fingerprint, and the write."""
        named: IntentKey = tool.intent_of(args, self.cases)
        return Intent(named.key, named.fingerprint, self._writes[tool.name].run(principal, args))

    def _open_case(self, principal: Principal, args: OpenCaseArgs) -> Write:
        def run(service_key: str) -> dict[str, Any]:
            cmd = OpenCase(title=args.title, actor=principal.actor, severity=args.severity,
                           attribution=attribution(principal))
            return {"case": reply_data(self.cases.open_case(cmd, service_key))}

        return run

    def _add_note(self, principal: Principal, args: NoteArgs) -> Write:
        case_id = case_id_of(args.case_id)

        def run(service_key: str) -> dict[str, Any]:
            note = NoteCase(case_id, "note", principal.actor, reason=args.text,
                            meta=attribution(principal))
            data = reply_data(self.cases.note(note, service_key))
            return {"case": _case_only(data), "note": data.get("note", "note")}

        return run

    def _record_findings(self, principal: Principal, args: FindingsArgs) -> Write:
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

        return run

    def _propose_plan(self, principal: Principal, args: ProposePlanArgs) -> Write:
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

        return run


def attribution(principal: Principal) -> dict[str, str]:
    """What the timeline keeps beside the principal's actor: who, and that it came over MCP."""
    return {**principal.attribution(), "via": "mcp"}


def _case_only(data: Mapping[str, object]) -> dict[str, object]:
    """A case-service reply's case, without the extras a move or note adds."""
    keys = ("case_id", "tenant", "title", "severity", "status", "version", "created_at",
            "updated_at")
    return {key: data[key] for key in keys if key in data}
