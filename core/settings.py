"""Settings of every opsgate process, read from ``OPSGATE_*`` environment variables (and ``.env``).

Secrets (API token, Slack and model keys) come only from the environment and are ``SecretStr``
so they never print. A list is JSON or comma-separated (``U1,U2``); an object is JSON. A mistake
is an ``InvalidSettings`` whose problems each fit on one line: the variable, what is wrong, and
what was expected (``core.settings_errors``); ``load_settings`` is the one place that reads.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from core.allowed_hosts import host_names
from core.settings_errors import Expect, InvalidSettings, invalid_settings

__all__ = ["InvalidSettings", "Settings", "load_settings"]


def _list_from_text(value: Any) -> Any:
    """A list setting from the environment: a JSON list, or names separated by commas."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not a JSON list ({exc})") from exc
    return [item.strip() for item in text.split(",") if item.strip()]


def _object_from_text(value: Any) -> Any:
    """An object setting from the environment: JSON."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from exc


def _http_url(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an absolute http:// or https:// URL")
    return value


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")
# What no allow-list may admit: these change which code runs, not what it is told.
_NEVER_NAMES = ("PATH", "IFS", "ENV", "BASH_ENV", "GCONV_PATH", "GLIBC_TUNABLES")
_NEVER_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_")


def _env_names(names: list[str]) -> list[str]:
    for name in names:
        if not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not a variable name (or a prefix ending in *)")
        if _admits_loader_variables(name):
            raise ValueError(f"{name} would let a plan change which code a script runs")
    return names


def _admits_loader_variables(entry: str) -> bool:
    if not entry.endswith("*"):
        return entry in _NEVER_NAMES or entry.startswith(_NEVER_PREFIXES)
    prefix = entry[:-1]
    return prefix.startswith(_NEVER_PREFIXES) or any(
        never.startswith(prefix) for never in (*_NEVER_NAMES, *_NEVER_PREFIXES))


Names = Annotated[list[str], NoDecode, BeforeValidator(_list_from_text),
                  Expect("names separated by commas (a,b) or a JSON list ([\"a\", \"b\"])")]
HttpUrl = Annotated[str, AfterValidator(_http_url), Expect("an http:// or https:// URL")]


def _nats_urls(value: str | None) -> str | None:
    """The NATS servers of the bus: ``nats://`` or ``tls://`` URLs separated by commas."""
    if value is None:
        return None
    urls = [url.strip() for url in value.split(",") if url.strip()]
    if not urls:
        raise ValueError("no server named")
    for url in urls:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError as exc:
            raise ValueError(f"{url!r} is not a URL ({exc})") from exc
        if parts.scheme not in ("nats", "tls") or not parts.hostname:
            raise ValueError(f"{url!r} is not a nats:// or tls:// URL with a host")
    return ",".join(urls)


BusUrl = Annotated[str, AfterValidator(_nats_urls), Expect(
    "nats:// URLs of a NATS JetStream server or cluster, separated by commas "
    "(nats://10.0.0.1:4222,nats://10.0.0.2:4222)")]
def _hosts_from_text(value: Any) -> Any:
    """Host names from the environment: a JSON list, or names separated by commas, where a
    bracketed IPv6 address (``[::1]:8080``) is a name, not a JSON list."""
    if isinstance(value, str) and value.strip().startswith("[") \
            and not re.match(r"\[\s*[\"\]]", value.strip()):
        return [item.strip() for item in value.split(",") if item.strip()]
    return _list_from_text(value)


HostNames = Annotated[list[str], NoDecode, BeforeValidator(_hosts_from_text),
                      AfterValidator(host_names), Expect(
    "host names with optional ports, separated by commas (opsgate.example.com,10.0.0.5:8080) "
    "or a JSON list")]
ObjectOfNumbers = Annotated[
    dict[str, float], NoDecode, BeforeValidator(_object_from_text),
    Expect('a JSON object of names and numbers, e.g. {"error_rate": 0.01}')]
ObjectOfObjects = Annotated[
    dict[str, dict[str, Any]], NoDecode, BeforeValidator(_object_from_text),
    Expect('a JSON object of names and objects, e.g. {"m": {"query": "…", "kind": "level"}}')]
EnvNames = Annotated[Names, AfterValidator(_env_names), Expect(
    "variable names or prefixes ending in *, separated by commas (A,B_*) or a JSON list")]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPSGATE_", env_file=".env", extra="ignore",
                                      allow_inf_nan=False)

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
    gateway_result_ttl_s: int = Field(
        default=86400, ge=1, description="How long Redis keeps a finished call's result."
    )
    gateway_lease_s: float = Field(
        default=30.0, gt=0, description="A claim's lease; must exceed the slowest executor."
    )
    gateway_key_prefix: str = Field(default="opsgate:gw:", description="Prefix of Redis keys.")
    gateway_redis_timeout_s: float = Field(
        default=0.5, gt=0, description="Redis socket and connect timeout of the gateway."
    )
    # Executor adapters (docs/executor.md). Lists are JSON or comma-separated, e.g.
    # OPSGATE_SCRIPT_ALLOWLIST=/usr/local/bin/restart-service,echo.
    script_allowlist: Names = Field(
        default_factory=list,
        description="Executables script.exec may run: absolute paths or names found on PATH "
        "at start. Empty: nothing may run.",
    )
    script_env_allow: EnvNames = Field(
        default_factory=list,
        description="Environment variables a script.exec plan may set besides LANG, LC_* and "
        "TZ: names, or prefixes ending in '*', e.g. 'DRAIN_SECONDS,SERVICE_*'.",
    )
    http_allowlist: Names = Field(
        default_factory=list,
        description="URL prefixes http.request and verify probes may call, e.g. "
        "'http://127.0.0.1:8081/'. Empty: nothing may be called.",
    )
    kubectl: str = Field(default="kubectl", description="kubectl for k8s.rollout: path or name.")
    traffic_gateway_url: HttpUrl | None = Field(
        default=None, description="Admin URL gateway.flip POSTs to. Unset: gateway.flip refused."
    )
    prometheus_url: HttpUrl | None = Field(
        default=None, description="Prometheus base URL for verify metrics. Unset: the "
        "stand-in table of OPSGATE_STATIC_METRICS if one is set, else no metrics source "
        "(plans with a metric check are refused at plan_ready).",
    )
    # What PromQL is sent, and how (core/domain/promql.py; docs/evidence.md "Bounded queries").
    promql_timeout_s: float = Field(
        default=10.0, gt=0, le=300,
        description="Prometheus' own `timeout` on every query opsgate sends (the HTTP client "
        "waits 1 s longer); a query that timed out is read again later, backing off.",
    )
    promql_max_range_s: int = Field(
        default=3600, ge=60, le=7 * 86400,
        description="The longest range a query may select (x[5m], a subquery's [1h:]); longer "
        "is refused before it is sent (a plan's verify query: at plan_ready).",
    )
    promql_min_step_s: int = Field(
        default=10, ge=1, le=3600,
        description="The finest step a subquery may take ([1h:10s]); finer is refused.",
    )
    promql_scope_label: Annotated[str, Expect("a Prometheus label name (letters, digits, _; "
                                              "e.g. tenant or namespace)")] | None = Field(
        default=None, pattern=r"^[a-zA-Z][a-zA-Z0-9_]*$",
        description="A label every selector must carry with the case's tenant as its value "
        "(e.g. tenant, namespace): a selector without it, or naming another value, is refused. "
        "Unset: queries are not scoped.",
    )
    static_metrics: ObjectOfNumbers = Field(
        default_factory=dict,
        description="A stand-in table the verifier reads when OPSGATE_PROMETHEUS_URL is unset "
        "(JSON object, name → number), e.g. '{\"http_5xx_ratio\": 0.001}'; its readings are "
        "labelled stand-in and a case closed on them is never offered as a verified fix. "
        "Empty (the default): no stand-in.",
    )
    static_metrics_before_change: ObjectOfNumbers = Field(
        default_factory=dict,
        description="Demo: what the stand-in table reads until an approved change has settled "
        "(JSON object, name → number; OPSGATE_STATIC_METRICS after it), so a verification reads "
        "bad before the change and good after. `opsgate demo` sets its own.",
    )
    # Verification after a change (docs/executor.md): readings are scheduled, never slept on.
    verify_poll_s: float = Field(
        default=15.0, gt=0, le=3600,
        description="Seconds between two readings of a plan's verify block while it waits for "
        "its window after the change to pass, or for the condition to start holding.",
    )
    verify_max_wait_s: float = Field(
        default=3600.0, gt=0, le=7 * 86400,
        description="The longest any verify block may wait after the change before the case "
        "parks: caps the block's timeout_s (default: its longest for_s + 600 s).",
    )
    verify_time_scale: float = Field(
        default=1.0, gt=0, le=1,
        description="Demo only: multiplies every verify window and deadline (0.01 makes a "
        "300 s window 3 s). Keep 1 in production: a shorter window proves less.",
    )
    step_output_limit: int = Field(
        default=4096, ge=256, le=1_048_576,
        description="Bytes of a step's output kept (head and tail) for the timeline.",
    )
    # The approval gate (docs/approvals.md).
    approvers: Names = Field(
        default_factory=list,
        description="Who may approve plans: Slack user ids and/or user group ids, e.g. "
        "'U012AB3CD,S0614TZR7' (or a JSON list). Empty: nobody approves; plans wait at the "
        "gate until someone is named (OPSGATE_AUTO_APPROVE still covers what it names).",
    )
    auto_approve: Literal["off", "noop_only", "low_risk"] = Field(
        default="off",
        description="Plans the gatekeeper approves without a human: none, noop-only plans, or "
        "noop-only plans and those with risk below OPSGATE_AUTO_APPROVE_MAX_RISK.",
    )
    auto_approve_max_risk: float = Field(
        default=0.3, ge=0, le=1, description="low_risk auto-approval: risk strictly below this."
    )
    two_person_risk: float = Field(
        default=0.7, ge=0, le=1,
        description="Plans with at least this risk need two distinct approvers.",
    )
    approval_ttl_s: float = Field(
        default=3600.0, ge=1, le=7 * 86400,
        description="Seconds a plan may wait at the gate for its approvals; then it expires and "
        "the case parks (ask for a fresh plan). From 1 s to a week; default an hour.",
    )
    # The closed loop: relay, bus and consumers (docs/operations.md).
    bus_url: BusUrl | None = Field(
        default=None,
        description="NATS JetStream carries the loop's messages between `opsgate relay` and "
        "`opsgate consume` (nats://host:4222, comma-separated for a cluster). Unset: Redis "
        "Streams when OPSGATE_REDIS_URL is set, else the in-process bus inside `opsgate serve`.",
    )
    jetstream_prefix: str = Field(
        default="opsgate", pattern=r"^[A-Za-z0-9_-]{1,32}$",
        description="Names on JetStream: subject <prefix>.<topic>, stream <prefix>_<topic> "
        "(dots as _), one stream per topic.",
    )
    jetstream_replicas: int = Field(
        default=1, ge=1, le=5,
        description="Copies JetStream keeps of each stream: 1 on one server, 3 in a cluster.",
    )
    jetstream_retention: Literal["limits", "interest"] = Field(
        default="limits",
        description="'limits': messages stay for OPSGATE_JETSTREAM_MAX_AGE_S; 'interest': a "
        "message goes once every opsgate consumer acknowledged it.",
    )
    jetstream_max_age_s: float = Field(
        default=7 * 86400.0, ge=60, le=365 * 86400,
        description="How long a stream keeps a message (both retentions); default a week.",
    )
    jetstream_ack_wait_s: float = Field(
        default=30.0, ge=1, le=3600,
        description="A delivered message not acknowledged this long is delivered again; a "
        "consumer still handling it says so every third of it (in-progress acks).",
    )
    jetstream_max_deliver: int = Field(
        default=5, ge=2, le=100,
        description="Deliveries of one message to one consumer, with waits doubling from "
        "OPSGATE_JETSTREAM_ACK_WAIT_S; the last becomes a dead letter (`opsgate outbox dead`) "
        "instead of being handled again.",
    )
    jetstream_duplicate_window_s: float = Field(
        default=120.0, ge=1, le=86400,
        description="JetStream drops a message published again with the same Nats-Msg-Id "
        "within this window (the relay's own retries).",
    )
    stream_prefix: str = Field(
        default="opsgate:stream:",
        description="Prefix of the Redis stream names (one stream per topic).",
    )
    relay_poll_s: float = Field(
        default=1.0, gt=0, le=60,
        description="The relay's polling floor: a lost NOTIFY costs at most this long.",
    )
    relay_batch_size: int = Field(default=200, ge=1, le=10_000)
    loop_poll_s: float = Field(
        default=0.1, gt=0, le=60,
        description="How often the in-process loop looks for new outbox rows on SQLite, "
        "which has no NOTIFY.",
    )
    stream_claim_idle_s: float = Field(
        default=30.0, gt=0,
        description="A stream entry pending this long with a consumer that died is taken over "
        "(XAUTOCLAIM); must exceed the slowest handling of one message.",
    )
    consumer_max_attempts: int = Field(
        default=4, ge=1, le=20,
        description="Attempts of a consumer on one message before it becomes a dead letter.",
    )
    delivery_bound_s: float = Field(
        default=120.0, gt=0, le=86_400,
        description="A published message that a consumer of its topic has not recorded in its "
        "inbox this long after is sent again by the relay and reported by /readyz and "
        "`opsgate reconcile`; must exceed the slowest handling of one message.",
    )
    # The agent (docs/agent.md). No model and no key: the offline planner model.
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
    runbooks_dir: str = Field(
        default="docs/runbooks", description="Folder of Markdown runbooks search_runbooks reads."
    )
    # Evidence: the analyst and the librarian (docs/evidence.md).
    series_dir: str | None = Field(
        default=None,
        description="Folder of recorded metric series (<metric>.json) the analyst reads when "
        "OPSGATE_PROMETHEUS_URL is unset. Both unset: the analyst reads no metrics.",
    )
    analysis_before_s: int = Field(
        default=3600, ge=300, le=7 * 86400,
        description="Baseline window the analyst reads before the incident start.",
    )
    analysis_after_s: int = Field(
        default=1800, ge=60, le=86400,
        description="Window the analyst reads from the incident start on.",
    )
    analysis_step_s: int = Field(default=60, ge=1, le=3600,
                                 description="Resolution of query_range.")
    metric_catalog: ObjectOfObjects = Field(
        default_factory=dict,
        description="Extra or replaced analyst metrics (JSON): name → {\"query\", \"kind\": "
        "\"level\"|\"ratio\", \"words\": [...]}; see docs/evidence.md.",
    )
    # The Slack front end (docs/slack.md). No bot token: Slack is off.
    slack_bot_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("slack_bot_token", "SLACK_BOT_TOKEN"),
        description="Bot token (xoxb-…) the bot calls the Web API with (SLACK_BOT_TOKEN).",
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("slack_signing_secret", "SLACK_SIGNING_SECRET"),
        description="Signing secret that verifies Slack's HTTP requests (SLACK_SIGNING_SECRET).",
    )
    slack_app_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("slack_app_token", "SLACK_APP_TOKEN"),
        description="App-level token (xapp-…) for `opsgate serve --socket-mode` (SLACK_APP_TOKEN).",
    )
    slack_api_url: HttpUrl = Field(
        default="https://slack.com/api/",
        description="Base URL of Slack's Web API, ending in '/' (a local sandbox or test server).",
    )
    incident_channel: str | None = Field(
        default=None,
        description="Channel id where cases opened outside Slack (REST, alerts) get their thread.",
    )
    slack_workers: int = Field(
        default=16, ge=1, le=512,
        description="Threads that run the slow part of Slack requests (the agent) after the ack.",
    )
    pin_reaction: str = Field(
        default="pushpin", pattern=r"^:?[a-z0-9_+'-]+:?$",
        description="The reaction (emoji name, e.g. pushpin or :pushpin:) that pins a message of "
        "a case's thread to the case's timeline.",
    )
    # Operations (docs/operations.md): logs, readiness, alert intake, reconciliation.
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
    reconcile_outbox_lag_s: float = Field(
        default=300.0, gt=0,
        description="`opsgate reconcile` reports outbox rows unpublished for longer than this.",
    )
    # The Model Context Protocol (docs/mcp.md): opsgate as a server, and the servers it calls.
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
    mcp_result_limit: int = Field(
        default=8192, ge=256, le=1_048_576,
        description="Characters of an external MCP tool's result the agent is shown at most.",
    )

    @property
    def bus_kind(self) -> Literal["jetstream", "redis-streams", "in-process"]:
        """Which bus carries the loop: OPSGATE_BUS_URL (JetStream) over OPSGATE_REDIS_URL."""
        if self.bus_url:
            return "jetstream"
        return "redis-streams" if self.redis_url else "in-process"


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (``overrides``: what the command line named); the one place
    that reads it. A mistake raises ``InvalidSettings``, one readable line per problem."""
    try:
        return Settings(**{name: value for name, value in overrides.items() if value is not None})
    except (ValidationError, SettingsError) as exc:
        raise invalid_settings(Settings, exc) from None
