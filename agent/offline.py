"""The offline planner model: a deterministic chat model for the embedded default (no network).

It is not a language model. It reads the conversation the graph gives it and answers the way a
careful model would, through the very same tools: look at the case and the runbooks, record
findings while the case is still analysed (citing the analyst's findings), then investigate the
case's component (``agent.offline_looks``: its metrics, alerts, changes, Deployments, pods and
events), decide from what the looks showed (``agent.offline_evidence``), record findings citing
them, and propose the plan made for the component — the plan of a verified past case that
matches the evidence, naming it; without a catalog, the catalog plan whose keywords match the
incident (else the one the best runbook names); with a catalog in which nothing matches the
report or shows a symptom, no change, asking a person to name the service — and say that a human
must approve it. After a Reject or a resume it follows the person's words where the evidence
allows (``agent.offline_steer``).
It never asks for a tool that does not exist, and no rule reads the incident's words, so
prompt-injected text changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from agent.evidence import evidence_of, findings_cited, learned_from, learned_plan
from agent.offline_evidence import Decision, instant
from agent.offline_looks import (
    Answers,
    decision,
    looked,
    made_plan,
    next_looks,
    template_call,
    unnamed,
    where_of,
    with_checks,
    written_plan,
)
from agent.offline_steer import Steered, ask_person, declined_plan, steered, words_plan
from agent.prompts import Asked, asked_about, replan_asked
from agent.usage import estimated
from core.alerts.text import shortened
from core.consumers.planner import DEFAULT_TEMPLATE, choose_template
from core.domain.fsm import CaseStatus
from core.domain.plan_templates import load_template, template_names

CASE_ID = re.compile(r"case ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
WANTS_PLAN = ("plan", "propose", "fix", "mitigat", "remediat")
ACTIONS = {"rollback": "roll the change back", "restart": "restart the component",
           "scale": "scale the component out", "failover": "fail over to the standby",
           "no change": "change nothing", "learned": "do what resolved the past case"}


def answers_of(messages: Sequence[BaseMessage]) -> Answers:
    """Every tool answer among ``messages``, by tool, with the arguments it was asked with."""
    asked = {call["id"]: call for m in messages if isinstance(m, AIMessage)
             for call in m.tool_calls}
    found: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for message in messages:
        if isinstance(message, ToolMessage):
            call = asked.get(message.tool_call_id)
            args = dict(call["args"]) if call is not None else {}
            found.setdefault(str(message.name), []).append((args, _json(message.content)))
    return Answers(found)


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
        reply.response_metadata = {"model_name": self.model_name}
        estimated(reply, messages, kwargs.get("tools") or ())
        return ChatResult(generations=[ChatGeneration(message=reply)])

    # -- the decision ---------------------------------------------------------------------

    def decide(self, messages: Sequence[BaseMessage]) -> AIMessage:
        case_id = self._case_id(messages)
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)),
                    default=0)
        request = str(messages[start].content) if messages else ""
        answers = answers_of(messages[start:])
        results = {name: dict(found[-1][1]) for name, found in answers.by_tool.items()}
        turn = sum(isinstance(m, AIMessage) for m in messages)
        evidence = evidence_of(messages)
        if case_id is None:
            return AIMessage(content="I can only work inside a case thread.")
        if not results:
            return self._calls(turn, [("get_case", {"case_id": case_id}),
                                      ("runbooks", {"query": asked_about(request)[:300]})])
        case = results.get("get_case", {})
        title = str(case.get("title", ""))
        asked = replan_asked(request)
        if "propose_plan" in results:
            return AIMessage(content=self._proposal_answer(results["propose_plan"], evidence,
                                                           answers, case, asked, request))
        status = self._status(case, results.get("record_findings"))
        wants_plan = any(word in request.lower() for word in WANTS_PLAN)
        if wants_plan and status == CaseStatus.ANALYZING and "record_findings" not in results:
            return self._calls(turn, [("record_findings", {
                "case_id": case_id, "summary": self._findings(title, results, evidence)})])
        if wants_plan and status == CaseStatus.PLANNING:
            return self._plan_turn(turn, case_id, case, answers, evidence, f"{title} {request}",
                                   asked)
        return AIMessage(content=self._status_answer(case, status, results))

    def _plan_turn(self, turn: int, case_id: str, case: dict[str, Any], answers: Answers,
                   evidence: dict[str, Any], incident: str, asked: Asked) -> AIMessage:
        """Look at the service first (``agent.offline_looks``), decide from what it showed
        (``agent.offline_evidence``) and the person's words after a Reject or a resume
        (``agent.offline_steer``), write the findings citing the looks, then propose the plan
        made for the component — or say why there is none."""
        looks = next_looks(case_id, case, answers, incident)
        if looks:
            return self._calls(turn, looks)
        if not answers.ok("recent_changes") and not answers.ok("query_metrics"):
            return self._unlooked(turn, case_id, case, answers, evidence, incident, asked)
        turned = self._steered(case, answers, evidence, asked)
        chosen = turned.decision
        if not answers.asked("record_findings"):
            said = f" {turned.said}" if turned.said else ""
            # how the person's words were taken (or why not) goes to the thread as well
            told = [("add_note", {"case_id": case_id, "text": turned.said})] if said else []
            return self._calls(turn, [("record_findings", {
                "case_id": case_id, "summary": self._cited(chosen, evidence) + said}), *told])
        template = template_call(chosen)
        if template and not answers.asked("plan_template"):
            return self._calls(turn, template)
        plan, refused = self._plan_for(chosen, answers, evidence, str(case.get("title", "")))
        if plan is not None and declined_plan(plan, asked):
            plan = written_plan(ask_person(chosen, "the same plan was declined"), answers)
        if plan is None:
            return AIMessage(content=f"{chosen.findings()} I did not propose a plan: "
                                     f"{refused or 'no plan could be written for it'}.")
        return self._calls(turn, [("propose_plan", {"case_id": case_id, "plan": plan})])

    @staticmethod
    def _steered(case: dict[str, Any], answers: Answers, evidence: dict[str, Any],
                 asked: Asked) -> Steered:
        """The evidence's decision, turned by the person's words where the evidence allows."""
        chosen = decision(case, answers, learned_plan(evidence, str(case.get("title", ""))))
        if asked == Asked():
            return Steered(chosen)
        opened = instant(str(case.get("created_at", ""))) or datetime.now(UTC)
        where = where_of(answers)
        return steered(chosen, looked(answers), opened, asked,
                       None if where is None else where.replicas)

    def _unlooked(self, turn: int, case_id: str, case: dict[str, Any], answers: Answers,
                  evidence: dict[str, Any], incident: str, asked: Asked) -> AIMessage:
        """Nothing could be looked at (no catalog, no component): after a person's words, the
        template they pick; else the plan that resolved the most similar verified case, else
        the template the incident's words pick, as written."""
        latest = {name: dict(found[-1][1]) for name, found in answers.by_tool.items()}
        nameless = unnamed(answers)
        if nameless is not None:  # a catalog, and nothing in it to look at: no unrelated plan
            asking = {**load_template("noop"), "title": (
                f"No change: {nameless[:1].lower()}{nameless[1:].rstrip('.')}; a person names "
                "the service "
                "(/case resume <id> <service>)")[:200]}
            return self._calls(turn, [("propose_plan", {"case_id": case_id, "plan": asking})])
        plan = None if asked != Asked() else learned_plan(evidence, str(case.get("title", "")))
        said = ""
        if plan is None:
            plan, said = words_plan(self._template(incident, latest), asked)
        told = [("add_note", {"case_id": case_id, "text": said})] if said else []
        return self._calls(turn, [*told, ("propose_plan", {"case_id": case_id, "plan": plan})])

    def _plan_for(self, chosen: Decision, answers: Answers, evidence: dict[str, Any],
                  title: str) -> tuple[dict[str, Any] | None, str | None]:
        if chosen.action == "learned":
            return learned_plan(evidence, title), None
        if template_call(chosen):
            made, refused = made_plan(answers, chosen)
            return (None, refused) if made is None else (with_checks(made, chosen), None)
        return written_plan(chosen, answers), None

    @staticmethod
    def _cited(chosen: Decision, evidence: dict[str, Any]) -> str:
        """The findings: what the looks showed, the decision, and the past case it follows."""
        source = f"; the plan is the one {learned_from(evidence)}" \
            if chosen.action == "learned" else ""
        return f"Offline planner: {chosen.findings()[:-1]}{source} → {ACTIONS[chosen.action]}."

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

    def _proposal_answer(self, result: dict[str, Any], evidence: dict[str, Any],
                         answers: Answers, case: dict[str, Any], asked: Asked,
                         request: str) -> str:
        """What was proposed, and what it rests on: what the looks showed, else the analyst's
        findings; how the person's words were taken; the past case it came from, when it did."""
        if result.get("error"):
            return f"I could not propose a plan: {refusal_in_words(result['error'])}"
        digest = str((result.get("result") or {}).get("plan_hash", ""))[:12]
        past = learned_plan(evidence, str(case.get("title", "")))
        if answers.ok("query_metrics") or answers.ok("recent_changes"):
            turned = self._steered(case, answers, evidence, asked)
            chosen = turned.decision
            learned = chosen.action == "learned"
            basis = f" It rests on what I looked at: {chosen.findings()}"
            basis += f" {turned.said}" if turned.said else ""
        elif asked != Asked():
            latest = {name: dict(found[-1][1]) for name, found in answers.by_tool.items()}
            learned = False
            _, said = words_plan(self._template(f"{case.get('title', '')} {request}", latest),
                                 asked)
            basis = (f" {said}" if said else "") + (" I could look at nothing (no catalog "
                                                    "component): nothing was checked.")
        else:
            learned, cited = past is not None, findings_cited(evidence)
            basis = (f" It rests on the analyst's {cited[:400]}." if cited else
                     " I could look at nothing (no catalog component): the plan follows the "
                     "incident's words and nothing was checked.")
        source = f", {learned_from(evidence)}" if learned else ""
        return (f"I proposed plan {digest}{source}.{basis} It waits at the gate: an authorized "
                "human must approve it; I cannot execute or approve plans.")

    def _status_answer(self, case: dict[str, Any], status: str,
                       results: dict[str, dict[str, Any]]) -> str:
        runbook = self._runbook(results)
        line = f"Case '{case.get('title')}' is {status} (version {case.get('version')})."
        return f"{line} Relevant runbook: {runbook}." if runbook else line


def refusal_in_words(error: object) -> str:
    """A refused proposal as a person reads it: the refusal's message and the problems it lists,
    in sentences, never the error's JSON; cut at a word."""
    if not isinstance(error, dict):
        return shortened(str(error), REFUSAL_CHARS)
    details = error.get("details")
    details = details if isinstance(details, dict) else {}
    said = str(error.get("message") or "the case service refused it").rstrip(".")
    # A problem the message already says (after its field's name) is not said twice.
    problems = [str(problem) for problem in details.get("problems") or []
                if problem and str(problem).partition(": ")[2] not in said]
    if problems:
        said += ": " + "; ".join(problems)
    cut = shortened(said, REFUSAL_CHARS)
    return cut if cut.endswith("…") else f"{cut}."


REFUSAL_CHARS = 300
