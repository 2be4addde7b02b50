"""The metrics source the settings name (Prometheus, else a stand-in table, else none), the
bounds of the PromQL opsgate sends, and where metric checks are read, in one line."""

from __future__ import annotations

from core.domain.promql import QueryBounds
from core.domain.verify import NO_METRICS_SOURCE
from core.evidence.prometheus import PrometheusSource
from core.evidence.sources import MetricSource
from core.evidence.stand_in import STAND_IN_SETTLE_S, StaticSource
from core.redact import url_without_credentials
from core.settings import Settings


def promql_bounds(settings: Settings) -> QueryBounds:
    """The bounds of every PromQL query opsgate sends (``OPSGATE_PROMQL_*``)."""
    return QueryBounds(max_range_s=settings.promql_max_range_s,
                       min_step_s=settings.promql_min_step_s,
                       scope_label=settings.promql_scope_label,
                       timeout_s=settings.promql_timeout_s)


def source_from_settings(settings: Settings) -> MetricSource | None:
    """Prometheus when ``OPSGATE_PROMETHEUS_URL`` is set, else the stand-in table of
    ``OPSGATE_STATIC_METRICS`` when one is set, else None: no metrics source."""
    if settings.prometheus_url:
        return PrometheusSource(settings.prometheus_url, bounds=promql_bounds(settings))
    if settings.static_metrics:
        return StaticSource(settings.static_metrics, settings.static_metrics_before_change,
                            settle_s=STAND_IN_SETTLE_S * settings.verify_time_scale)
    return None


def has_metrics_source(settings: Settings) -> bool:
    """Whether a metric check can be read at all (Prometheus, or a stand-in table)."""
    return bool(settings.prometheus_url or settings.static_metrics)


def metrics_source_line(settings: Settings) -> str:
    """Where metric checks are read, in one line (the serve banner, ``/readyz``)."""
    if settings.prometheus_url:
        return f"Prometheus at {url_without_credentials(settings.prometheus_url)}"
    if settings.static_metrics:
        return ("a stand-in table (OPSGATE_STATIC_METRICS): its readings are labelled stand-in "
                "and never make a verified fix")
    return f"none: plans with a metric check are refused; {NO_METRICS_SOURCE}"
