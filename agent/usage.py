"""What a model call is known by and what it costs: the model's name as metrics and ledgers show
it, and the token estimate that models without a tokenizer (offline, scripted) report."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata


def model_name(model: Any) -> str:
    for attr in ("model_name", "model", "name_of_model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _text_of(message: BaseMessage) -> str:
    text = message.content if isinstance(message.content, str) else json.dumps(message.content)
    if isinstance(message, AIMessage) and message.tool_calls:
        text += json.dumps(message.tool_calls, default=str, sort_keys=True)
    return text


ESTIMATED = "opsgate_tokens_estimated"
"""Set in a reply's ``response_metadata`` when its token counts are ``estimate_usage``'s, not
the model's: the timeline says "about N tokens (estimated)"."""


def estimated(reply: AIMessage, messages: Sequence[BaseMessage], tools: Sequence[Any]) -> None:
    """Give ``reply`` the estimate of its tokens, marked as an estimate."""
    reply.usage_metadata = estimate_usage(messages, reply, tools)
    reply.response_metadata = {**reply.response_metadata, ESTIMATED: True}


def estimate_usage(messages: Sequence[BaseMessage], reply: AIMessage,
                   tools: Sequence[Any] = ()) -> UsageMetadata:
    """A deterministic token estimate (4 characters a token) for models without a tokenizer:
    the prompt, the bound tool specs and the reply."""
    prompt_chars = sum(len(_text_of(m)) for m in messages)
    prompt_chars += len(json.dumps(list(tools), default=str, sort_keys=True)) if tools else 0
    tokens_in = math.ceil(prompt_chars / 4)
    tokens_out = math.ceil(len(_text_of(reply)) / 4)
    return UsageMetadata(input_tokens=tokens_in, output_tokens=tokens_out,
                         total_tokens=tokens_in + tokens_out)
