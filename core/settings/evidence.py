"""The settings of evidence: where metrics are read and how PromQL is bounded, verification after a
change, and what the analyst and the librarian read (docs/evidence.md, docs/executor.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AliasChoices, BaseModel, Field, SecretStr

from core.settings.forms import HttpUrl, ObjectOfNumbers, ObjectOfObjects
from core.settings_errors import Expect


class MetricsSettings(BaseModel):
    """Where metric checks are read, and what PromQL is sent and how (core/domain/promql.py;
    docs/evidence.md "Bounded queries")."""

    prometheus_url: HttpUrl | None = Field(
        default=None, description="Prometheus base URL for verify metrics. Unset: the "
        "stand-in table of OPSGATE_STATIC_METRICS if one is set, else no metrics source "
        "(plans with a metric check are refused at plan_ready).",
    )
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


class VerifySettings(BaseModel):
    """Verification after a change (docs/executor.md): readings are scheduled, never slept on."""

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


class AnalysisSettings(BaseModel):
    """What the analyst and the librarian read (docs/evidence.md)."""

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
    runbooks_dir: str = Field(
        default="docs/runbooks", description="Folder of Markdown runbooks search_runbooks reads."
    )


EMBEDDED_MODEL = "wordllama-l2-256"
"""The embedded embedding model: WordLlama's l2_supercat weights (256 dimensions), installed with
its Python package; nothing is downloaded."""
NO_EMBEDDINGS = "none"


class EmbeddingSettings(BaseModel):
    """How the librarian embeds what it indexes and what it is asked (docs/evidence.md "Recall
    by meaning"): the embedded model, or any OpenAI-compatible ``/embeddings`` endpoint."""

    embeddings_model: str = Field(
        default=EMBEDDED_MODEL, min_length=1, max_length=200,
        description=f"The embedding model: '{EMBEDDED_MODEL}' (the default, offline, installed "
        "with opsgate), a model an OpenAI-compatible /embeddings endpoint serves (e.g. "
        f"'text-embedding-3-small'), or '{NO_EMBEDDINGS}' (full-text search only). Changing it "
        "needs `opsgate library reindex`.",
    )
    embeddings_base_url: HttpUrl | None = Field(
        default=None, description="The OpenAI-compatible endpoint serving "
        "OPSGATE_EMBEDDINGS_MODEL (e.g. http://127.0.0.1:11434/v1). Unset: the chat model's, "
        "OPENAI_BASE_URL, else OpenAI's own.",
    )
    embeddings_api_key: SecretStr | None = Field(
        default=None, description="The embeddings endpoint's key. Unset: none, except at the "
        "chat model's endpoint, which gets the chat model's OPENAI_API_KEY.",
    )
    chat_base_url: HttpUrl | None = Field(
        default=None, validation_alias=AliasChoices("openai_base_url"),
        description="OPENAI_BASE_URL (the chat model's endpoint, agent/settings.py): where "
        "embeddings go when OPSGATE_EMBEDDINGS_BASE_URL is unset.",
    )
    chat_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("openai_api_key"),
        description="OPENAI_API_KEY: sent with embeddings only to the chat model's endpoint, "
        "never to another OPSGATE_EMBEDDINGS_BASE_URL.",
    )
    embeddings_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="Timeout of one embeddings request (per attempt).",
    )
    embeddings_max_retries: int = Field(
        default=1, ge=0, le=5, description="Retries of an embeddings request that failed.",
    )
