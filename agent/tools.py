"""The tools one agent run may call on its case, each answered as a ``ToolReply`` for the model.

Read-only tools read the case service. Side-effecting tools run through the gateway with a
business key derived from the intent (never from the model's ``tool_call_id``), so the same
intent asked again — in the same message, on a later turn, after a retry or a crash — replays
the first outcome. Every gateway call carries the run's fence: a run that lost the case's session
lock is refused before anything runs (``LostLock`` stops it).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import ValidationError

from agent import metrics
from agent.looking import LOOKED, Looking
from agent.mcp_tools import McpToolbox, Offered
from agent.replies import LostLock, ToolReply, reply_data
from agent.tool_specs import OFFERED, tool_specs
from core.cases.timeline import entries_of
from core.chat import ChatNotConfigured
from core.domain.commands import Fence, NoteCase, OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plans import plan_problems
from core.errors import NotFound, StaleFence
from core.evidence.baseline import read_before, tell_the_model
from core.evidence.configured import source_from_settings
from core.gateway import (
    CallResult,
    CallStatus,
    SessionLease,
    ToolCall,
    canonical_json,
    session_of,
)
from core.gateway.keys import short_digest, text_key
from core.investigate.progress import Watched
from core.library.runbooks import runbooks_folder
from core.mcp.remote import RemoteUnavailable
from core.strict_json import non_finite_problems
from core.tools.args import (
    CaseRef,
    ComponentsArgs,
    FindingsArgs,
    ListArgs,
    NoteArgs,
    OpenCaseArgs,
    ProposePlanArgs,
    RunbookArgs,
    TimelineArgs,
    case_id_of,
)
from core.tools.catalogue import (
    ADD_NOTE,
    CASE_TIMELINE,
    GET_CASE,
    LIST_CASES,
    NAME_COMPONENTS,
    OPEN_CASE,
    PROPOSE_PLAN,
    RECORD_FINDINGS,
    RUNBOOKS,
    IntentKey,
    route,
    routes,
)

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

ACTOR = "agent"
IN_PROGRESS_WAIT_S = 5.0
TIMELINE_LIMIT = 30
LIST_LIMIT = 20
REFUSED_TOOLS = ("execute_plan", "approve_plan", "run_plan", "gate_approved")


class CaseTools:
    """The tools of one run on one case, holding that run's lock and fence."""

    def __init__(self, app: App, case_id: UUID, lock: SessionLease, *, requester: str | None,
                 correlation_id: str | None, mcp: McpToolbox | None = None) -> None:
        self.app = app
        self.cases = app.cases
        self.case_id = case_id
        self.lock = lock
        self.requester = requester
        self.correlation_id = correlation_id
        self.runbooks = runbooks_folder(app.settings.runbooks_dir)
        # What the model asked for in this run, for the turn's agent_usage note.
        self.stats: Counter[str] = Counter()
        self.mcp = mcp
        self._mcp_offered: dict[str, Offered] = {} if mcp is None else mcp.offered()
        self.looking = Looking(self)
        self.watch: Callable[[str], None] | None = None  # told each look as it starts
        self.investigation = Watched()  # shown each look and the findings

    @property
    def session_id(self) -> str:
        return session_of(self.case_id)

    @property
    def fence(self) -> Fence:
        return Fence(self.session_id, self.lock.fence.token)

    def specs(self) -> list[dict[str, Any]]:
        """The function specs bound to the model: the case tools, then the external MCP tools
        this run may call (read-only ones only)."""
        return tool_specs() + ([] if self.mcp is None else self.mcp.specs())

    # -- dispatch -------------------------------------------------------------------------

    def call(self, name: str, args: Any) -> ToolReply:
        """Answer one tool call; ``LostLock`` and outages propagate (the run stops)."""
        reply = self._dispatch(name, args)
        status = "ok" if reply.ok else "error"
        known = name in OFFERED or name in self._mcp_offered
        label = name if name in OFFERED else "mcp" if known else "unknown"
        metrics.TOOL_CALLS.labels(tool=label, status=status).inc()
        self.stats.update(["tool_calls"] + ([] if reply.ok else ["tool_errors"])
                          + ([] if known else ["unknown_tools"])
                          + (["mcp_calls"] if label == "mcp" else [])
                          + (["invalid_plans"] if reply.invalid_plan else []))
        return reply

    def _dispatch(self, name: str, args: Any) -> ToolReply:
        if name in self._mcp_offered:
            return self._mcp_read(self._mcp_offered[name], args)
        if name not in OFFERED:
            return self.refuse_unknown(name, args)
        if not isinstance(args, Mapping):
            return ToolReply.of(False, {"error": "arguments must be a JSON object"})
        unreadable = non_finite_problems(args, "args")
        if unreadable:  # the model's JSON was read by a parser that accepts NaN and Infinity
            return ToolReply.of(False, {"error": "the arguments hold numbers JSON does not "
                                        "allow; nothing ran", "problems": unreadable[:20]},
                                invalid_plan=name == "propose_plan")
        try:
            parsed = OFFERED[name].parse(args)
        except ValidationError as exc:
            problems = [f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}"
                        for e in exc.errors(include_url=False)]
            return ToolReply.of(False, {"error": "invalid arguments", "problems": problems})
        try:
            if name in LOOKED:
                return self.looking.answer(name, parsed)
            return ROUTES[name].run(self, parsed)
        except NotFound as missing:
            return ToolReply.of(False, {"error": missing.message})

    def malformed(self, name: str | None, raw_args: str | None, error: str | None) -> ToolReply:
        """A tool call whose arguments were not valid JSON: nothing ran."""
        metrics.TOOL_CALLS.labels(tool=name if name in OFFERED else "unknown",
                                  status="malformed").inc()
        self.stats.update(["tool_calls", "tool_errors", "malformed_calls"])
        return ToolReply.of(False, {"error": "the arguments are not valid JSON; nothing ran",
                                    "detail": (error or "")[:200],
                                    "received": (raw_args or "")[:200]})

    def refuse_unknown(self, name: str, args: Any) -> ToolReply:
        """A tool that does not exist: refused, and recorded on the case once per intent when
        it asked to execute or approve (the gate is for humans)."""
        body: dict[str, Any] = {"error": f"there is no tool {name!r}; nothing ran",
                                "tools": sorted(OFFERED) + sorted(self._mcp_offered)}
        if self.mcp is not None and self.mcp.plan_only(name):
            body["error"] = (f"{name!r} changes things outside opsgate: it runs only as a step "
                             "of an approved plan (action mcp.call with server, tool and "
                             "arguments); propose a plan instead; nothing ran")
            self.note("agent_refused", f"the model asked for {name!r}; refused (a mutating MCP "
                      "tool runs only as an approved plan step)", {"tool": name[:80]},
                      key=f"refused:{self.case_id}:{short_digest(name)}")
        elif self._looks_like_gate(name):
            body["error"] = (f"there is no tool {name!r}: plans run only after an authorized "
                             "human approves them; nothing ran")
            self.note("agent_refused", f"the model asked for {name!r}; refused (no such tool)",
                      {"tool": name[:80]}, key=f"refused:{self.case_id}:{short_digest(name)}")
        return ToolReply.of(False, body)

    @staticmethod
    def _looks_like_gate(name: str) -> bool:
        lowered = name.lower()
        return lowered in REFUSED_TOOLS or any(w in lowered for w in ("exec", "approv"))

    # -- read-only ------------------------------------------------------------------------

    def _get_case(self, args: CaseRef) -> ToolReply:
        return ToolReply.of(True, self.cases.get_case(case_id_of(args.case_id)))

    def _list_cases(self, args: ListArgs) -> ToolReply:
        limit = min(args.limit, LIST_LIMIT)
        return ToolReply.of(True, {"cases": self.cases.list_cases(args.status, limit=limit)})

    def _case_timeline(self, args: TimelineArgs) -> ToolReply:
        rows, _ = self.cases.timeline_tail(case_id_of(args.case_id),
                                           min(args.limit, TIMELINE_LIMIT))
        slim = [{"event": e.event, "actor": e.actor, "reason": e.reason, "to": e.target,
                 "at": e.at} for e in entries_of(rows)]
        return ToolReply.of(True, {"timeline": slim})

    def _runbooks(self, args: RunbookArgs) -> ToolReply:
        hits = self.app.library.find_runbooks(self.runbooks, args.query, limit=args.limit)
        # the model gets the runbook's name, not where this server keeps the file
        return ToolReply.of(True, {"runbooks": [{k: v for k, v in hit.items() if k != "path"}
                                                for hit in hits]})

    def _mcp_read(self, offered: Offered, args: Any) -> ToolReply:
        """A read-only external MCP tool, through the gateway: an identical call in the same
        run replays its first answer; the next run asks the server again."""
        if not isinstance(args, Mapping):
            return ToolReply.of(False, {"error": "arguments must be a JSON object"})
        unreadable = non_finite_problems(args, "args")
        if unreadable:
            return ToolReply.of(False, {"error": "the arguments hold numbers JSON does not "
                                        "allow; nothing ran", "problems": unreadable[:20]})
        key = (f"mcp:{offered.server.name}:{offered.tool.name}:{self.session_id}:"
               f"{self.lock.fence.token}:{short_digest(canonical_json(dict(args)))}")
        call = ToolCall(f"mcp.{offered.server.name}.{offered.tool.name}", dict(args), ACTOR,
                        self.session_id, business_key=key)
        assert self.mcp is not None
        toolbox = self.mcp
        try:
            result = self.read(call, lambda given: toolbox.call(offered, given))
        except RemoteUnavailable as down:
            return ToolReply.of(False, {"error": f"{down.message}; nothing is known to have "
                                        "happened; ask again later"})
        if result.status is CallStatus.IN_PROGRESS:
            return ToolReply.of(False, {"error": "the same call is still running; ask again"})
        body: dict[str, Any] = {"status": str(result.status), "result": result.result}
        if result.status is CallStatus.REPLAYED:
            self.stats["replays"] += 1
        answer = result.result if isinstance(result.result, Mapping) else {}
        return ToolReply.of(not answer.get("is_error"), body)

    # -- side-effecting -------------------------------------------------------------------

    def _open_case(self, args: OpenCaseArgs) -> ToolReply:
        named = OPEN_CASE.intent_of(args, self.cases)
        # The agent's key: a business key is one case anywhere, a title one case per session.
        key = (f"open_case:{args.business_key}" if args.business_key
               else f"open_case:{self.session_id}:{text_key(args.title)}")
        actor = self.requester or ACTOR

        def run(_: Mapping[str, Any]) -> Any:
            cmd = OpenCase(title=args.title, actor=actor, severity=args.severity,
                           correlation_id=self.correlation_id)
            return reply_data(self.cases.open_case(cmd, f"agent:{key}"))

        return self._through_gateway("open_case", IntentKey(key, named.fingerprint), run)

    def _record_findings(self, args: FindingsArgs) -> ToolReply:
        case_id = self._own_case(args.case_id)
        if case_id is None:
            return self._not_this_case(args.case_id)
        named = RECORD_FINDINGS.intent_of(args, self.cases)

        def run(_: Mapping[str, Any]) -> Any:
            case = self.cases.get_case(case_id)
            if case["status"] == CaseStatus.ANALYZING:
                cmd = TransitionCase(case_id, CaseEvent.ANALYSIS_DONE, actor=ACTOR,
                                     reason=args.summary[:500], fence=self.fence,
                                     meta={"findings": args.summary},
                                     correlation_id=self.correlation_id)
                return reply_data(self.cases.transition(cmd, f"agent:{named.key}"))
            note = NoteCase(case_id, "findings", ACTOR, reason=args.summary[:500],
                            meta={"findings": args.summary}, correlation_id=self.correlation_id)
            return reply_data(self.cases.note(note, f"agent:{named.key}"))

        reply = self._through_gateway("record_findings", named, run)
        if reply.ok:
            self.investigation.found(args.summary)
        return reply

    def _propose_plan(self, args: ProposePlanArgs) -> ToolReply:
        case_id = self._own_case(args.case_id)
        if case_id is None:
            return self._not_this_case(args.case_id)
        problems = plan_problems(args.plan)
        if problems:
            return ToolReply.of(False, {"error": "the plan fails the ChangePlan schema; nothing "
                                        "was proposed; fix every problem and propose again",
                                        "problems": problems[:20]}, invalid_plan=True)
        named = PROPOSE_PLAN.intent_of(args, self.cases)

        def run(_: Mapping[str, Any]) -> Any:
            cmd = TransitionCase(case_id, CaseEvent.PLAN_READY, actor=ACTOR, plan=args.plan,
                                 reason=f"plan proposed by the agent: {args.plan['title']}",
                                 meta={"source": ACTOR}, fence=self.fence,
                                 requester=self.requester, correlation_id=self.correlation_id)
            data = reply_data(self.cases.transition(cmd, f"agent:{named.key}"))
            answer = {"case": data, "plan_hash": named.fingerprint["plan_hash"],
                      "next": "waiting at the gate for a human approval"}
            return {**answer, **self._holding_already(args.plan)}

        return self._through_gateway("propose_plan", named, run)

    def _holding_already(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        """The verify checks that already hold before any change, told once (this answer is
        the proposal's, replayed as it is): such a check cannot show the change worked."""
        tenant = self.cases.get_case(self.case_id).get("tenant")
        readings = read_before(plan.get("verify"), source_from_settings(self.app.settings),
                               None if tenant is None else str(tenant))
        told = tell_the_model(readings)
        return {} if told is None else {
            "verify_note": told,
            "verify_now": [reading.as_dict() for reading in readings]}

    def _name_components(self, args: ComponentsArgs) -> ToolReply:
        case_id = self._own_case(args.case_id)
        if case_id is None:
            return self._not_this_case(args.case_id)
        named = NAME_COMPONENTS.intent_of(args, self.cases)

        def run(_: Mapping[str, Any]) -> Any:
            reply = self.cases.name_components(case_id, args.components, ACTOR,
                                               f"agent:{named.key}",
                                               correlation_id=self.correlation_id)
            return reply_data(reply)

        return self._through_gateway("name_components", named, run)

    def _add_note(self, args: NoteArgs) -> ToolReply:
        case_id = self._own_case(args.case_id)
        if case_id is None:
            return self._not_this_case(args.case_id)
        named = ADD_NOTE.intent_of(args, self.cases)
        key = f"update:{case_id}:{text_key(args.text)}"  # the agent's, kept for its ledger rows

        def run(_: Mapping[str, Any]) -> Any:
            # The timeline first: a failed post is retried, the note replays by its own key.
            note = NoteCase(case_id, "agent_update", ACTOR, reason=args.text,
                            correlation_id=self.correlation_id)
            reply_data(self.cases.note(note, f"agent:{key}"))
            return {"posted": self.app.chat.say(str(case_id), (args.text,))}

        try:  # ledgered as "post_update", the tool's name before the catalogue
            return self._through_gateway("post_update", IntentKey(key, named.fingerprint), run)
        except ChatNotConfigured as held:  # nothing recorded as posted; the note stands
            return ToolReply.of(False, {"error": f"{held.message}; the update is on the "
                                        "case's timeline"})

    def looking_at(self, words: str) -> None:
        """What the run is looking at now ("querying http_5xx_ratio for payments-api"), told
        to whoever watches (the thread's status line)."""
        if self.watch is not None:
            try:
                self.watch(words)
            except Exception:  # a status line never stops the investigation
                log.exception("agent: could not show what the run looks at")

    # -- notes the agent itself writes ------------------------------------------------------

    def note(self, event: str, reason: str, meta: dict[str, Any], *, key: str,
             post: bool = False) -> CallResult:
        """A fact about the run on the case's timeline (and in its chat thread when ``post``),
        once per ``key``, through the gateway under the run's fence."""

        def run(_: Mapping[str, Any]) -> Any:
            cmd = NoteCase(self.case_id, event, ACTOR, reason=reason, meta=meta,
                           correlation_id=self.correlation_id)
            data = reply_data(self.cases.note(cmd, f"agent:{key}"))
            if post:
                self.app.chat.say(str(self.case_id), (reason,))
            return {"note": data.get("note")}

        call = ToolCall("agent.note", {"event": event, "reason": reason, "meta": meta},
                        ACTOR, self.session_id, business_key=key)
        return self._run(call, run)

    # -- plumbing -------------------------------------------------------------------------

    def _through_gateway(self, tool: str, named: IntentKey,
                         run: Callable[[Mapping[str, Any]], Any]) -> ToolReply:
        """``tool``: the ledger's name of the call; ``named.fingerprint``: the normalized
        arguments the gateway fingerprints, so a repeat worded with other spacing or case
        replays while a changed intent under the same key is refused
        (``idempotency_key_reused``)."""
        call = ToolCall(tool, named.fingerprint, ACTOR, self.session_id, business_key=named.key)
        result = self._run(call, run)
        if result.status is CallStatus.IN_PROGRESS:
            return ToolReply.of(False, {"error": "the same call is still running elsewhere; "
                                        "ask again later"})
        body: dict[str, Any] = {"status": str(result.status)}
        if result.status is CallStatus.REPLAYED:
            self.stats["replays"] += 1
            body["note"] = "this was done before; this is the earlier outcome, nothing ran again"
        if result.error is not None:
            return ToolReply.of(False, {**body, "error": result.error})
        return ToolReply.of(True, {**body, "result": result.result})

    def renew(self) -> None:
        """Extend the run's lock lease; ``LostLock`` when another run holds it now."""
        if not self.app.gateway.locks or not self.app.gateway.locks.renew(self.lock):
            raise LostLock(f"the session lock of {self.session_id} was lost")

    def read(self, call: ToolCall, executor: Callable[[Mapping[str, Any]], Any]) -> CallResult:
        """A read through the gateway under the run's fence: the same call again in this run
        replays its first answer."""
        return self._run(call, executor, idempotent=True)

    def _run(self, call: ToolCall, executor: Callable[[Mapping[str, Any]], Any], *,
             idempotent: bool = False) -> CallResult:
        self.renew()
        result = self.app.gateway.run(call, executor, fence=self.lock.fence.token,
                                      wait_s=IN_PROGRESS_WAIT_S, idempotent=idempotent)
        if isinstance(refused := result.refusal, StaleFence):
            raise LostLock(refused.message)
        return result

    def _own_case(self, raw: str) -> UUID | None:
        try:
            case_id = UUID(raw)
        except ValueError:
            return None
        return case_id if case_id == self.case_id else None

    def _not_this_case(self, raw: str) -> ToolReply:
        return ToolReply.of(False, {"error": f"this conversation may change only case "
                                    f"{self.case_id}, not {raw!r}; nothing ran"})


# The typed handler of each tool the agent offers (``agent.tool_specs.OFFERED``).
ROUTES = routes(route(GET_CASE, CaseTools._get_case), route(LIST_CASES, CaseTools._list_cases),
                route(CASE_TIMELINE, CaseTools._case_timeline),
                route(RUNBOOKS, CaseTools._runbooks), route(OPEN_CASE, CaseTools._open_case),
                route(RECORD_FINDINGS, CaseTools._record_findings),
                route(PROPOSE_PLAN, CaseTools._propose_plan), route(ADD_NOTE, CaseTools._add_note),
                route(NAME_COMPONENTS, CaseTools._name_components))
assert set(ROUTES) | set(LOOKED) == set(OFFERED), "every offered tool needs its handler"
