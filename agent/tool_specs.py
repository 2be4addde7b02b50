"""The tools the model may call, and nothing else: the catalogue's case tools (``core.tools``)
the agent offers, what the model is told of each, and the OpenAI function specs bound to the
model. There is no tool that executes or approves a plan."""

from __future__ import annotations

from typing import Any

from core.investigate.tools import LOOKS
from core.tools.args import input_schema
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
    CaseTool,
)

# What the agent's own answers hold (they differ from the MCP server's: a case without its plan,
# the last 30 timeline rows, an update also posted in the chat thread).
DESCRIBED: tuple[tuple[CaseTool[Any], str], ...] = (
    (GET_CASE, "Read one case: title, severity, status, version."),
    (LIST_CASES, "List recent cases, optionally only those in one status."),
    (CASE_TIMELINE, "Read a case's timeline: every transition and note, oldest first."),
    (RUNBOOKS, "Search the team's Markdown runbooks; returns titles and excerpts."),
    (OPEN_CASE, "Open a new incident case (once per business key or title)."),
    (RECORD_FINDINGS, "Record what the investigation found on this case (ends ANALYZING)."),
    (PROPOSE_PLAN, "Propose a ChangePlan for this case; it is schema-checked and then waits "
                   "for human approval. You cannot approve or execute it."),
    (ADD_NOTE, "Add a short update to this case: it goes on the case's timeline and is posted "
               "in its chat thread."),
    (NAME_COMPONENTS, "Name the service-catalog components this case concerns (once, before "
                      "proposing a plan): their owners are who may approve it."),
    *((look, look.description) for look in LOOKS),
)
OFFERED: dict[str, CaseTool[Any]] = {tool.name: tool for tool, _ in DESCRIBED}


def tool_specs() -> list[dict[str, Any]]:
    """The OpenAI function specs of every tool, in a stable order."""
    return [{"type": "function",
             "function": {"name": tool.name, "description": description,
                          "parameters": input_schema(tool.args)}}
            for tool, description in DESCRIBED]
