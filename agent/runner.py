"""One agent turn on one case: take the case's session lock (a new fence), finish a turn a crash
cut off inside the tool node (its calls replay), run the graph on the new input with the case's
evidence from the library beside it (``agent.evidence``), and account for the model calls and
tokens on the timeline. Model failures end the turn with a short explanation and change nothing
else; ``converse`` never raises for them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from agent import metrics
from agent.checkpoints import Checkpoints, open_checkpoints
from agent.evidence import case_evidence
from agent.graph import ModelUnavailable, RunUsage, build_graph
from agent.mcp_tools import McpToolbox, toolbox_from_settings
from agent.models import chat_model
from agent.replies import LostLock
from agent.settings import AgentSettings
from agent.state import usage_of
from agent.tools import CaseTools
from agent.usage import model_name
from core.errors import NotFound, Unavailable
from core.gateway import SessionLease, session_of
from core.investigate.progress import Watched

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from core.bootstrap import App
    from core.investigate.progress import Investigation

log = logging.getLogger(__name__)

LOCK_WAIT_S = 5.0
BUSY = "Another agent run is working on this case right now; ask again in a moment."
STORE_DOWN = "opsgate's store is unavailable right now; nothing changed. Ask again shortly."
LOST = ("My run on this case was superseded by a newer one; I stopped without changing "
        "anything more.")
INTERNAL = ("I hit an internal error and stopped; what I did before it is on the case's "
            "timeline. Ask again in a moment.")
PLAN_GAVE_UP = ("I could not produce a plan that meets the ChangePlan schema; the case stays in "
                "PLANNING (see its timeline).")


@dataclass(frozen=True)
class TurnResult:
    """What a turn says back and how it ended."""

    reply: str
    outcome: str  # answered, interrupted, busy, model_unavailable, lost_lock, plan_invalid, …
    usage: dict[str, int] = field(default_factory=dict)


class Agent:
    """The agent of one opsgate process: a model, the checkpointer, and turns on cases."""

    def __init__(self, app: App, *, model: BaseChatModel | None = None,
                 checkpoints: Checkpoints | None = None, lock_wait_s: float = LOCK_WAIT_S,
                 interrupt_before: list[str] | None = None,
                 tool_factory: Callable[..., CaseTools] = CaseTools,
                 mcp: McpToolbox | None = None) -> None:
        self.app = app
        self.tool_factory = tool_factory
        # External MCP tools (OPSGATE_MCP_SERVERS): read-only ones, through the gateway.
        self.mcp = mcp if mcp is not None else toolbox_from_settings(app.settings)
        agent_settings = app.settings.layer(AgentSettings)
        self.model = model if model is not None else chat_model(agent_settings)
        self.max_model_calls = agent_settings.agent_max_model_calls
        self.lock_wait_s = lock_wait_s
        self.interrupt_before = interrupt_before
        self._checkpoints = checkpoints
        self._opening = threading.Lock()

    @property
    def checkpoints(self) -> Checkpoints:
        with self._opening:
            if self._checkpoints is None:
                self._checkpoints = open_checkpoints(self.app.engine)
            return self._checkpoints

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.close()

    # -- the two entries ------------------------------------------------------------------

    def converse(self, case_id: UUID, text: str, *, user: str, correlation_id: str,
                 watch: Callable[[str], None] | None = None) -> str:
        """The reply to ``user``'s message in the case thread (the bot posts it). Never raises:
        model failures and outages come back as a short explanation."""
        try:
            return self.run_turn(case_id, text, requester=user, correlation_id=correlation_id,
                                 trigger="chat", watch=watch).reply
        except Exception:  # the chat front end must always get something to post
            log.exception("agent: the turn on case %s failed", case_id)
            return INTERNAL

    def run_turn(self, case_id: UUID, text: str | None, *, requester: str | None,
                 correlation_id: str | None, trigger: str, post_failures: bool = False,
                 still_wanted: Callable[[], bool] | None = None,
                 watch: Callable[[str], None] | None = None) -> TurnResult:
        """One turn; ``text`` None only finishes a turn that was cut off (resume).
        ``watch``: told what each look of the turn is looking at, as it starts.
        ``still_wanted``: asked after such a resume; False skips ``text`` (the resumed turn
        already did what the request asked)."""
        lock = self._lock_case(case_id)
        if isinstance(lock, TurnResult):
            return self._counted(trigger, lock)
        usage = RunUsage()
        try:  # whatever fails from here on (the checkpointer's set-up too) frees the lock
            tools = self.tool_factory(self.app, case_id, lock, requester=requester,
                                      correlation_id=correlation_id, mcp=self.mcp)
            tools.watch = watch
            tools.investigation = Watched(self._investigation(case_id))
            graph = build_graph(self.model, tools, self.checkpoints.saver,
                                max_model_calls=self.max_model_calls,
                                usage=usage, interrupt_before=self.interrupt_before)
            try:
                result = self._guarded(graph, tools, text, usage, post_failures, still_wanted)
            finally:
                tools.investigation.ended()
            self._account(graph, tools, usage, trigger)
        finally:
            self._release(lock)
        return self._counted(trigger, TurnResult(result.reply, result.outcome, usage.as_dict()))

    def _investigation(self, case_id: UUID) -> Investigation | None:
        """Who shows this run's looks and findings (the case's thread), if anyone does."""
        shows = self.app.extensions.investigation
        try:
            return None if shows is None else shows(self.app, case_id)
        except Exception:  # a thread that cannot be found never stops the run
            log.exception("agent: the investigation of case %s cannot be shown", case_id)
            return None

    def _lock_case(self, case_id: UUID) -> SessionLease | TurnResult:
        """The case's session lock, or why the turn cannot run: no such case, the store is
        down, or another turn holds the lock."""
        locks = self.app.gateway.locks
        assert locks is not None, "build_gateway always gives the gateway its session locks"
        if self.mcp is not None:
            self.mcp.offered()  # list the external servers before the lock's lease starts
        try:
            self.app.cases.get_case(case_id)
            lock = locks.acquire(session_of(case_id), wait_s=self.lock_wait_s)
        except NotFound:
            return TurnResult(f"There is no case {case_id}.", "not_found")
        except Unavailable:
            return TurnResult(STORE_DOWN, "unavailable")
        return TurnResult(BUSY, "busy") if lock is None else lock

    # -- inside the lock ------------------------------------------------------------------

    def _guarded(self, graph: CompiledStateGraph[Any], tools: CaseTools, text: str | None,
                 usage: RunUsage, post_failures: bool,
                 still_wanted: Callable[[], bool] | None) -> TurnResult:
        try:
            return self._turn(graph, tools, text, still_wanted)
        except ModelUnavailable as failed:
            return TurnResult(self._unavailable(tools, failed, post_failures),
                              "model_unavailable")
        except LostLock:
            log.warning("agent: lost the session lock of case %s mid-turn", tools.case_id)
            return TurnResult(LOST, "lost_lock")
        except Unavailable:
            return TurnResult(STORE_DOWN, "unavailable")

    def _turn(self, graph: CompiledStateGraph[Any], tools: CaseTools, text: str | None,
              still_wanted: Callable[[], bool] | None = None) -> TurnResult:
        config = thread_config(tools.case_id, self.max_model_calls)
        if "tools" in graph.get_state(config).next:
            # A turn was cut off inside the tool node (crash, interrupt): run it to its end
            # first. Its calls that already ran replay from the gateway; nothing runs twice.
            graph.invoke(None, config)
            if still_wanted is not None and not still_wanted():
                text = None
        if text is None:
            state = graph.get_state(config).values
        else:
            start = {"messages": [HumanMessage(text)], "case_id": str(tools.case_id),
                     "turn_model_calls": 0, "invalid_plans": 0, "stop": None,
                     "evidence": case_evidence(self.app.library, tools.case_id)}
            state = graph.invoke(start, config)
        if graph.get_state(config).next:
            return TurnResult("Paused before running tools; resume to continue.", "interrupted")
        return final_reply(state)

    def _unavailable(self, tools: CaseTools, failed: ModelUnavailable, post: bool) -> str:
        reason = (f"The model ({model_name(self.model)}) did not answer ({str(failed)[:160]}); "
                  "nothing was changed. Ask again in a moment.")
        key = f"unavailable:{tools.case_id}:{tools.correlation_id or 'none'}"
        try:
            tools.note("agent_unavailable", reason, {"model": model_name(self.model)}, key=key,
                       post=post)
        except (LostLock, Unavailable) as exc:
            log.warning("agent: could not note the model failure on %s: %s", tools.case_id, exc)
        return reason

    def _account(self, graph: CompiledStateGraph[Any], tools: CaseTools, usage: RunUsage,
                 trigger: str) -> None:
        """Model calls and tokens of this run, and the case's totals, on the timeline."""
        if not usage.model_calls and not usage.failures:
            return
        config = thread_config(tools.case_id, self.max_model_calls)
        snapshot = graph.get_state(config)
        checkpoint = str(snapshot.config.get("configurable", {}).get("checkpoint_id", "none"))
        meta = {"model": model_name(self.model), "trigger": trigger, **usage.as_dict(),
                "failed_calls": len(usage.failures), "tokens_estimated": usage.estimated,
                "tools": dict(sorted(tools.stats.items())),
                **({"cut": tools.looking.budget.cuts[:20]} if tools.looking.budget.cuts else {}),
                "case_total": usage_of(snapshot.values)}
        reason = f"{usage.model_calls} model call(s), {usage.tokens_said()}"
        try:
            tools.note("agent_usage", reason, meta,
                       key=f"usage:{tools.case_id}:{checkpoint}:{len(usage.failures)}")
        except (LostLock, Unavailable) as exc:
            log.warning("agent: usage of case %s not noted: %s", tools.case_id, exc)

    def _release(self, lock: SessionLease) -> None:
        locks = self.app.gateway.locks
        try:
            if locks is not None:
                locks.release(lock)
        except Unavailable as exc:  # the lease ends on its own
            log.warning("agent: could not release the lock of %s: %s", lock.session_id, exc)

    @staticmethod
    def _counted(trigger: str, result: TurnResult) -> TurnResult:
        metrics.RUNS.labels(trigger=trigger, outcome=result.outcome).inc()
        return result


def thread_config(case_id: UUID, max_model_calls: int) -> RunnableConfig:
    """The LangGraph config of the case's thread."""
    return {"configurable": {"thread_id": session_of(case_id)},
            "recursion_limit": 2 * max_model_calls + 6}


def final_reply(state: dict[str, Any]) -> TurnResult:
    if state.get("stop") == "plan_invalid":
        return TurnResult(PLAN_GAVE_UP, "plan_invalid")
    last = next((m for m in reversed(state.get("messages", [])) if isinstance(m, AIMessage)),
                None)
    text = str(last.content).strip() if last is not None and last.content else ""
    outcome = "budget" if state.get("stop") == "budget" else "answered"
    return TurnResult(text or "Done.", outcome)
