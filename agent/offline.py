"""The offline planner model: a deterministic chat model for the embedded default (no network).

It is not a language model. It reads the conversation the graph gives it and answers the way a
careful model would, through the very same tools: look at the case and the runbooks, record
findings while the case is still analysed (citing the analyst's findings and the most similar
verified case, from the evidence context ``agent.evidence`` adds), then propose the plan that
resolved the most similar verified case, adapted to this case and naming it — else the catalog
plan (core/domain/plan_templates) whose keywords match the incident text (else the one the best
runbook names) — and say that a human must approve it.
It never asks for a tool that does not exist, so prompt-injected text changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from agent.evidence import evidence_of, findings_cited, learned_from, learned_plan
from agent.offline_looks import made_plan, next_looks
from agent.usage import estimate_usage
from core.consumers.planner import DEFAULT_TEMPLATE, choose_template
from core.domain.fsm import CaseStatus
from core.domain.plan_templates import load_template, template_names

CASE_ID = re.compile(r"case ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
WANTS_PLAN = ("plan", "propose", "fix", "mitigat", "remediat")


def _json(content: Any) -> dict[str, Any]:
    try:
        value = json.loads(content) if isinstance(content, str) else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


OFFLINE_NAME = "offline-planner"


class OfflinePlannerModel(BaseChatModel):
    """Deterministic, template-based stand-in for an LLM; see the module docstring."""

    model_name: str = OFFLINE_NAME

    @property
    def _llm_type(self) -> str:
        return OFFLINE_NAME

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None,
                   **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        reply = self.decide(messages)
        reply.usage_metadata = estimate_usage(messages, reply, kwargs.get("tools") or ())
        reply.response_metadata = {"model_name": self.model_name}
        return ChatResult(generations=[ChatGeneration(message=reply)])

    # -- the decision ---------------------------------------------------------------------

    def decide(self, messages: Sequence[BaseMessage]) -> AIMessage:
        case_id = self._case_id(messages)
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)),
                    default=0)
        request = str(messages[start].content) if messages else ""
        results = {str(m.name): _json(m.content) for m in messages[start:]
                   if isinstance(m, ToolMessage)}
        turn = sum(isinstance(m, AIMessage) for m in messages)
        evidence = evidence_of(messages)
        if case_id is None:
            return AIMessage(content="I can only work inside a case thread.")
        if not results:
            return self._calls(turn, [("get_case", {"case_id": case_id}),
                                      ("runbooks", {"query": request[:300]})])
        case = results.get("get_case", {})
        title = str(case.get("title", ""))
        if "propose_plan" in results:
            learned = learned_plan(evidence, title) is not None
            return AIMessage(content=self._proposal_answer(results["propose_plan"],
                                                           evidence if learned else {},
                                                           findings_cited(evidence)))
        status = self._status(case, results.get("record_findings"))
        wants_plan = any(word in request.lower() for word in WANTS_PLAN)
        if wants_plan and status == CaseStatus.ANALYZING and "record_findings" not in results:
            return self._calls(turn, [("record_findings", {
                "case_id": case_id, "summary": self._findings(title, results, evidence)})])
        if wants_plan and status == CaseStatus.PLANNING:
            return self._plan_turn(turn, case_id, case, results, evidence, f"{title} {request}")
        return AIMessage(content=self._status_answer(case, status, results))

    def _plan_turn(self, turn: int, case_id: str, case: dict[str, Any],
                   results: dict[str, dict[str, Any]], evidence: dict[str, Any],
                   incident: str) -> AIMessage:
        """The learned plan; else look at the service first (``agent.offline_looks``) and
        propose the template made for its component — or, when it cannot be made, say why."""
        plan = learned_plan(evidence, str(case.get("title", "")))
        if plan is None:
            looks = next_looks(case_id, case, results, incident)
            if looks:
                return self._calls(turn, looks)
            plan, refused = made_plan(results)
            if refused is not None:
                return AIMessage(content=f"I did not propose a plan: {refused}.")
        if plan is None:
            plan = load_template(self._template(incident, results))
        return self._calls(turn, [("propose_plan", {"case_id": case_id, "plan": plan})])

    @staticmethod
    def _case_id(messages: Sequence[BaseMessage]) -> str | None:
        for message in messages:
            if isinstance(message, SystemMessage):
                found = CASE_ID.search(str(message.content))
                if found:
                    return found.group(1)
        return None

    @staticmethod
    def _status(case: dict[str, Any], findings: dict[str, Any] | None) -> str:
        recorded = ((findings or {}).get("result") or {}) if findings else {}
        return str(recorded.get("status") or case.get("status") or "")

    @staticmethod
    def _calls(turn: int, calls: list[tuple[str, dict[str, Any]]]) -> AIMessage:
        tool_calls = [ToolCall(name=name, args=args, id=f"offline-{turn}-{n}", type="tool_call")
                      for n, (name, args) in enumerate(calls)]
        return AIMessage(content="", tool_calls=tool_calls)

    @staticmethod
    def _template(incident: str, results: dict[str, dict[str, Any]]) -> str:
        """The catalog template the incident's words pick; when none does, the first one the
        best-matching runbook names."""
        chosen = choose_template(incident)
        found = results.get("runbooks", {}).get("runbooks") or []
        named = [t for book in found[:1] for t in book.get("templates", [])
                 if t in template_names()]
        return named[0] if chosen == DEFAULT_TEMPLATE and named else chosen

    @staticmethod
    def _runbook(results: dict[str, dict[str, Any]]) -> str | None:
        found = results.get("runbooks", {}).get("runbooks") or []
        return str(found[0]["title"]) if found else None

    def _findings(self, title: str, results: dict[str, dict[str, Any]],
                  evidence: dict[str, Any]) -> str:
        runbook = self._runbook(results)
        parts = [f"Offline planner: incident '{title}'", findings_cited(evidence),
                 f"runbook: {runbook}" if runbook else "no runbook matched"]
        if learned_plan(evidence, title) is not None:
            parts.append(f"plan {learned_from(evidence)}")
        return "; ".join(part for part in parts if part) + "."

    @staticmethod
    def _proposal_answer(result: dict[str, Any], learned: dict[str, Any], cited: str) -> str:
        """``learned``: the evidence whose best plan was proposed (empty for a template);
        ``cited``: the analyst's findings it rests on ("" when there are none)."""
        if result.get("error"):
            return f"I could not propose a plan: {json.dumps(result.get('error'))[:300]}"
        digest = str((result.get("result") or {}).get("plan_hash", ""))[:12]
        source = f", {learned_from(learned)}" if learned else ""
        basis = f" It rests on the analyst's {cited[:400]}." if cited else ""
        return (f"I proposed plan {digest}{source}.{basis} It waits at the gate: an authorized "
                "human must approve it; I cannot execute or approve plans.")

    def _status_answer(self, case: dict[str, Any], status: str,
                       results: dict[str, dict[str, Any]]) -> str:
        runbook = self._runbook(results)
        line = f"Case '{case.get('title')}' is {status} (version {case.get('version')})."
        return f"{line} Relevant runbook: {runbook}." if runbook else line
