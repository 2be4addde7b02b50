"""The investigator's read tools in one agent run: each look goes through the gateway as a read
(ledgered; the same look again in the same run replays its first answer, the next run asks the
source again), its answer cut to its token budget, and all answers of the run kept within their
share of the model's context. Text the sources hold (logs, events, change descriptions) reaches
the model inside the answer's JSON, as data."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agent.replies import ToolReply
from core.errors import OpsgateError, Unavailable
from core.gateway import CallStatus, ToolCall, canonical_json
from core.gateway.keys import short_digest
from core.investigate.budget import TurnBudget, fit
from core.investigate.gists import gist, sources
from core.investigate.looks import CaseLooks, Sources
from core.investigate.progress import LookSeen, Watched
from core.investigate.sources import sources_of
from core.investigate.templates import plan_for_case
from core.investigate.tools import LOOKS, TemplateArgs
from core.investigate.words import look_words
from core.tools.args import Args

if TYPE_CHECKING:
    from collections import Counter
    from uuid import UUID

    from core.bootstrap import App
    from core.gateway import CallResult, SessionLease

LOOKED = {tool.name: tool for tool in LOOKS}


class Run(Protocol):
    """What a look needs of the run it is part of (``agent.tools.CaseTools``)."""

    app: App
    case_id: UUID
    lock: SessionLease
    stats: Counter[str]

    @property
    def session_id(self) -> str: ...

    def read(self, call: ToolCall, executor: Callable[[Mapping[str, Any]], Any]
             ) -> CallResult: ...

    def looking_at(self, words: str) -> None: ...

    @property
    def investigation(self) -> Watched: ...


class Looking:
    """The looks of one run on one case (``CaseTools`` answers them through it)."""

    def __init__(self, tools: Run, sources: Sources | None = None) -> None:
        self.tools = tools
        settings = tools.app.settings
        self.result_tokens = settings.tool_result_tokens
        self.budget = TurnBudget(int(settings.model_context_tokens
                                     * settings.tool_context_share))
        self._sources = sources
        self._looks: CaseLooks | None = None
        self._named: tuple[str, ...] = ()
        self._count = 0  # looks asked in this run

    @property
    def looks(self) -> CaseLooks:
        """The case's looks, scoped to the components the case names now: a run that names
        them (name_components) reads them from its next look on."""
        app = self.tools.app
        case = app.cases.get_case(self.tools.case_id)
        named = tuple(case.get("components") or ())
        if self._looks is None or named != self._named:
            sources = self._sources or sources_of(app.settings, app.engine)
            self._looks = CaseLooks.of(case, app.catalog.current(), app.settings, sources)
            self._named = named
        return self._looks

    def answer(self, name: str, args: Args) -> ToolReply:
        """One look's answer for the model (errors as sentences it can act on), told to whoever
        watches the investigation as it starts and as it ends (an error with its reason)."""
        self._count += 1
        number, title = self._count, self._title(name, args)
        self.tools.investigation.look(LookSeen(number, name, title, "in_progress"))
        reply = self._answer(name, args)
        said = _body(reply)
        prometheus = self.tools.app.settings.prometheus_url
        self.tools.investigation.look(LookSeen(
            number, name, title, "complete" if reply.ok else "error",
            gist(name, args.model_dump(mode="json"), said),
            sources(name, args.model_dump(mode="json"), said,
                    None if prometheus is None else str(prometheus))))
        return reply

    def _title(self, name: str, args: Args) -> str:
        try:
            words = look_words(name, args, self.looks)
        except OpsgateError:  # the case cannot be read now: the look itself will say so
            words = name.replace("_", " ")
        return words[:1].upper() + words[1:]

    def _answer(self, name: str, args: Args) -> ToolReply:
        if self.budget.left <= 0:
            self.tools.stats["looks_over_budget"] += 1
            return ToolReply.of(False, {"error": "the tool answers of this turn have used their "
                                        f"share of the model's context ({self.budget.limit_tokens}"
                                        " tokens); decide with what you have"})
        tool = self.tools
        key = (f"look:{name}:{tool.session_id}:{tool.lock.fence.token}:"
               f"{short_digest(canonical_json(args.model_dump(mode='json')))}")
        call = ToolCall(f"look.{name}", args.model_dump(mode="json"), "agent", tool.session_id,
                        business_key=key)
        result = tool.read(call, self._reader(name, args))
        if result.status is CallStatus.IN_PROGRESS:
            return ToolReply.of(False, {"error": "the same look is still running; ask again"})
        if result.status is CallStatus.REPLAYED:
            tool.stats["replays"] += 1
        answer = result.result if isinstance(result.result, Mapping) else {}
        if "error" in answer:
            return ToolReply.of(False, dict(answer))
        fitted = fit(answer, min(self.result_tokens, self.budget.left))
        self.budget.spend(fitted, name)
        tool.stats["looks"] += 1
        tool.stats["looks_cut"] += bool(fitted.cut)
        return ToolReply.of(True, fitted.body)

    def _reader(self, name: str, args: Args) -> Callable[[Mapping[str, Any]], Any]:
        def read(_: Mapping[str, Any]) -> Any:
            try:
                looks = self.looks
                self.tools.looking_at(look_words(name, args, looks))
                if isinstance(args, TemplateArgs):
                    return plan_for_case(looks, args.template, args.component)
                answered: dict[str, Any] = getattr(looks, name)(args)
                return answered
            except Unavailable as down:
                return {"error": f"{down.message}; nothing was read; ask again later"}
            except OpsgateError as refused:  # out of scope, not configured, cannot be made
                return {"error": refused.message}
        return read


def _body(reply: ToolReply) -> Mapping[str, Any]:
    try:
        body = json.loads(reply.content)
    except ValueError:
        return {}
    return body if isinstance(body, Mapping) else {}
