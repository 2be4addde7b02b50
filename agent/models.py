"""Which chat model the agent talks to: an OpenAI-compatible endpoint when ``OPSGATE_MODEL`` and
``OPENAI_API_KEY`` are set, the offline planner model otherwise."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from agent.offline import OfflinePlannerModel
from agent.settings import AgentSettings


def chat_model(settings: AgentSettings) -> BaseChatModel:
    """The configured model: ChatOpenAI with explicit timeout and retries (its defaults are no
    timeout and 2 retries), or the deterministic offline planner model."""
    if not settings.model or settings.openai_api_key is None:
        return OfflinePlannerModel()
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=settings.model, api_key=settings.openai_api_key,
                      base_url=settings.openai_base_url, timeout=settings.model_timeout_s,
                      max_retries=settings.model_max_retries, temperature=0,
                      use_responses_api=False, stream_usage=False)
