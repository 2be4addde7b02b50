"""The agent's settings (docs/agent.md): which chat model it asks and how, contributed to every
opsgate process through ``Extensions.settings`` and read with
``app.settings.layer(AgentSettings)``. No model and no key: the offline planner model."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr

from core.settings import OpsgateSettings
from core.settings.forms import HttpUrl


class AgentSettings(OpsgateSettings):
    """The chat model, its endpoint and limits, and what an agent run may spend."""

    model: str | None = Field(
        default=None,
        description="Chat model the agent asks (OPSGATE_MODEL), e.g. 'gpt-4o-mini' or a local "
        "model's name. Unset, or no OPENAI_API_KEY: the offline planner model.",
    )
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("openai_api_key", "OPENAI_API_KEY"),
        description="Key for OpenAI or an OpenAI-compatible server (OPENAI_API_KEY).",
    )
    openai_base_url: HttpUrl | None = Field(
        default=None, validation_alias=AliasChoices("openai_base_url", "OPENAI_BASE_URL"),
        description="OpenAI-compatible endpoint (OPENAI_BASE_URL), e.g. vLLM, Ollama, llama.cpp.",
    )
    model_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="Timeout of one model request (per attempt)."
    )
    model_max_retries: int = Field(
        default=1, ge=0, le=5, description="Retries of a model request that failed or timed out."
    )
    agent_max_model_calls: int = Field(
        default=12, ge=1, le=100, description="Model calls one agent run may make at most."
    )
    mcp_result_limit: int = Field(
        default=8192, ge=256, le=1_048_576,
        description="Characters of an external MCP tool's result the agent is shown at most.",
    )
