"""The settings of a serving process: its database, cache and API (who may call it, by which
host name), its logs and readiness, alert intake and the MCP server (docs/operations.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from core.settings.forms import HostNames


class ServingSettings(BaseModel):
    """The database, Redis, the API's tokens and host names, and the tenant."""

    database_url: str = Field(
        default="sqlite:///./opsgate.db",
        description="SQLAlchemy URL: sqlite:///path (embedded) or postgresql+psycopg://… ",
    )
    redis_url: str | None = Field(default=None, description="Unset: no Redis (embedded default).")
    api_token: SecretStr | None = Field(
        default=None, description="When set, every REST write needs 'Authorization: Bearer …'."
    )
    api_reads: Literal["token", "open"] = Field(
        default="token",
        description="'token': once any token is configured (OPSGATE_API_TOKEN or a live "
        "`opsgate token`), REST reads need one too (reader or above). 'open': reads stay open "
        "(a laptop).",
    )
    allowed_hosts: HostNames = Field(
        default_factory=list,
        description="The names clients reach the server by (its Host header), with an optional "
        "port, e.g. 'opsgate.example.com,10.0.0.5:8080': a request whose Host, or Origin when "
        "it sends one, names another is refused with 403 (DNS rebinding), token or not. "
        "localhost, 127.0.0.1 and [::1] are always allowed. Unset: only those, and `opsgate "
        "serve` bound to another address refuses to start.",
    )
    tenant: str = Field(default="default", max_length=64)
    db_pool_size: int = Field(default=10, ge=1, le=200)


class OperationsSettings(BaseModel):
    """Logs, readiness, alert intake and reconciliation (docs/operations.md)."""

    log_format: Literal["text", "json"] = Field(
        default="text",
        description="Log lines for people (text) or one JSON object a line for log pipelines.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO")
    ready_max_relay_lag_s: float = Field(
        default=60.0, gt=0,
        description="/readyz answers 503 while the oldest unpublished outbox row is older.",
    )
    alert_token: SecretStr | None = Field(
        default=None,
        description="Bearer token Alertmanager sends to POST /alerts/alertmanager. Unset: the "
        "endpoint refuses every request.",
    )
    metrics_port: int | None = Field(
        default=None, ge=1, le=65535,
        description="`opsgate relay`/`consume` serve /metrics on this port (the API serves it "
        "itself). Unset: no metrics server.",
    )
    heartbeat_dir: str | None = Field(
        default=None,
        description="Where `opsgate relay`/`consume` write their heartbeat every 2 s "
        "(opsgate-relay.json, opsgate-consume.json), which `opsgate health relay|consume` "
        "reads: a liveness probe for processes that serve no port. Unset: the temporary "
        "directory ($TMPDIR, else /tmp).",
    )
    reconcile_outbox_lag_s: float = Field(
        default=300.0, gt=0,
        description="`opsgate reconcile` reports outbox rows unpublished for longer than this.",
    )


class McpSettings(BaseModel):
    """The Model Context Protocol (docs/mcp.md): opsgate as a server, and the servers it calls."""

    mcp_token: SecretStr | None = Field(
        default=None,
        description="The API token `opsgate mcp` (stdio) acts as, unless --token names one. "
        "Unset: the local operator.",
    )
    mcp_servers: str | None = Field(
        default=None,
        description="Path of a JSON or YAML file listing the external MCP servers the agent "
        "(read-only tools) and plans (mcp.call steps) may call. Unset: none.",
    )
