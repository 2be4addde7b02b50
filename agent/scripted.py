"""A chat model that replays scripted turns: for tests, ``tests/scenarios/`` and the agent
benchmark. Each call returns the next scripted ``AIMessage`` (or raises the scripted exception);
its usage is the same deterministic estimate the offline planner model reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from agent.usage import estimated

Turn = AIMessage | Exception


class ScriptedChatModel(BaseChatModel):
    """Returns ``turns`` in order; past the end, a plain "done" answer."""

    turns: list[Any] = Field(default_factory=list)
    model_name: str = "scripted"
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None,
                   **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        turn: Turn = self.turns.pop(0) if self.turns else AIMessage(content="done")
        if isinstance(turn, Exception):
            raise turn
        reply = turn.model_copy(deep=True)
        estimated(reply, messages, kwargs.get("tools") or ())
        return ChatResult(generations=[ChatGeneration(message=reply)])
