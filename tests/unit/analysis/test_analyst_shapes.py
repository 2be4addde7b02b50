"""The analyst's statistics on recorded incident shapes: a latency step, an error-rate spike and
a slow leak each give the right finding; a flat series gives none (the false-positive test)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.analysis.catalog import catalog, metrics_for, title_words
from core.analysis.findings import find, summary_line
from core.analysis.sources import RecordedSource
from core.analysis.stats import analyse, change_point, linear_fit

SERIES = Path(__file__).parents[2] / "fixtures" / "series"
START = datetime(2026, 11, 23, 6, 0, tzinfo=UTC)
SPECS = catalog()
ALL = list(SPECS.values())


def findings(shape: str, title: str | None = None) -> list[dict]:
    specs = ALL if title is None else metrics_for(title, SPECS)
    return find(specs, RecordedSource(SERIES / shape), START)["findings"]


def test_a_latency_step_is_a_shift_in_the_mean_with_its_change_point():
    [finding] = findings("latency_step")
    assert finding["metric"] == "latency_p95_ms" and finding["statistic"] == "shift"
    assert 110 < finding["baseline"] < 130 and finding["current"] > 300
    assert finding["change"] > 1.5 and finding["confidence"] > 0.9
    assert finding["changed_at_s"] == 300  # the step in the recording
    assert finding["z_latest"] > 10
    assert finding["link"].startswith("file://") and "histogram_quantile" in finding["query"]


def test_an_error_rate_spike_is_an_error_ratio():
    [finding] = findings("error_spike")
    assert finding["metric"] == "http_5xx_ratio" and finding["statistic"] == "error_ratio"
    assert finding["baseline"] < 0.003 and finding["current"] > 0.05
    assert finding["current"] / finding["baseline"] > 20
    assert finding["changed_at_s"] == 120
    assert "x)" in finding["summary"]


def test_a_slow_leak_is_a_steady_trend_not_a_step():
    [finding] = findings("slow_leak")
    assert finding["metric"] == "memory_working_set_bytes" and finding["statistic"] == "trend"
    assert finding["change"] > 0.4 and finding["confidence"] > 0.9  # R² of the fit
    assert "rising steadily" in finding["summary"]


def test_flat_series_give_no_finding():
    result = find(ALL, RecordedSource(SERIES / "flat"), START)
    assert result["findings"] == []
    assert set(result["checked"]) == {"latency_p95_ms", "http_5xx_ratio",
                                      "memory_working_set_bytes"}
    assert summary_line(result).startswith("no significant change in latency_p95_ms")


def test_a_metric_without_a_recording_is_listed_as_missing_not_fatal():
    result = find([SPECS["cpu_usage_ratio"], SPECS["latency_p95_ms"]],
                  RecordedSource(SERIES / "latency_step"), START)
    assert result["missing"] == [{"metric": "cpu_usage_ratio",
                                  "reason": "no recorded series cpu_usage_ratio.json"}]
    assert [f["metric"] for f in result["findings"]] == ["latency_p95_ms"]


@pytest.mark.parametrize(("title", "metrics"), [
    ("checkout p95 latency over 2 s", ["latency_p95_ms"]),
    ("HighErrorRate on payments", ["http_5xx_ratio"]),
    ("orders pod OOMKilled, memory leak suspected", ["memory_working_set_bytes"]),
    ("something is off", ["latency_p95_ms", "http_5xx_ratio"]),  # the golden signals
])
def test_the_title_names_the_metrics(title, metrics):
    assert [spec.name for spec in metrics_for(title, SPECS)] == metrics


def test_camel_case_alert_names_are_read_as_words():
    assert title_words("KubePodCrashLooping api") == ["kube", "pod", "crash", "looping", "api"]


def test_the_catalog_can_be_extended_and_bad_entries_are_refused():
    specs = catalog({"queue_depth": {"query": "sum(queue_depth)", "words": ["queue"]}})
    assert [s.name for s in metrics_for("queue backing up", specs)] == ["queue_depth"]
    with pytest.raises(ValueError, match="queue_depth"):
        catalog({"queue_depth": {"kind": "histogram", "query": "x"}})


def test_too_few_points_on_either_side_give_no_finding():
    series = [(float(t), 100.0 if t < 0 else 500.0) for t in range(-180, 600, 60)]
    assert analyse("latency_p95_ms", series, "level") is None


def test_the_statistics_are_the_textbook_ones():
    line = [(float(t), 2.0 * t + 1.0) for t in range(10)]
    slope, intercept, r2 = linear_fit(line)
    assert (round(slope, 9), round(intercept, 9), round(r2, 9)) == (2.0, 1.0, 1.0)
    step = [(float(t), 0.0 if t < 6 else 5.0) for t in range(12)]
    assert change_point(step) == 6.0


def test_the_shipped_demo_recordings_show_one_finding_per_kind_of_case():
    from core.analysis.sources import RECORDED_DEMO

    source = RecordedSource(RECORDED_DEMO)
    statistics = {title: [f["statistic"] for f in find(metrics_for(title, SPECS), source,
                                                       START)["findings"]]
                  for title in ("checkout latency", "HighErrorRate", "memory leak")}
    assert statistics == {"checkout latency": ["shift"], "HighErrorRate": ["error_ratio"],
                          "memory leak": ["trend"]}
