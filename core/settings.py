"""Settings of every opsgate process, read from ``OPSGATE_*`` environment variables (and ``.env``).

Secrets (API token, Slack and model keys) come only from the environment and are ``SecretStr``
so they never print.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPSGATE_", env_file=".env", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./opsgate.db",
        description="SQLAlchemy URL: sqlite:///path (embedded) or postgresql+psycopg://… ",
    )
    redis_url: str | None = Field(default=None, description="Unset: no Redis (embedded default).")
    api_token: SecretStr | None = Field(
        default=None, description="When set, every REST write needs 'Authorization: Bearer …'."
    )
    tenant: str = Field(default="default", max_length=64)
    db_pool_size: int = Field(default=10, ge=1, le=200)


def load_settings() -> Settings:
    """Settings from the environment; the one place that reads it."""
    return Settings()
