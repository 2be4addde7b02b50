"""One case's analysis: every metric the case names, read around the incident start and judged;
the result is plain JSON (it is stored once through the gateway, then noted on the case)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core.analysis.catalog import MetricSpec
from core.analysis.sources import SeriesSource
from core.analysis.stats import DEFAULT_THRESHOLDS, Thresholds, analyse
from core.domain.messages import Evidence
from core.evidence.sources import EvidenceMissing


def find(specs: Sequence[MetricSpec], source: SeriesSource, incident_at: datetime,
         limits: Thresholds = DEFAULT_THRESHOLDS) -> Evidence:
    """``{"findings": [...], "checked": [metric, ...], "missing": [{"metric", "reason"}]}``:
    each finding with its query and link; a metric that cannot be read is listed, not fatal."""
    findings: list[dict[str, Any]] = []
    checked: list[str] = []
    missing: list[dict[str, str]] = []
    for spec in specs:
        try:
            series = source.read(spec, incident_at)
        except EvidenceMissing as exc:
            missing.append({"metric": spec.name, "reason": exc.reason})
            continue
        checked.append(spec.name)
        finding = analyse(spec.name, series, spec.kind, limits)
        if finding is not None:
            findings.append({**finding.as_dict(), "query": spec.query,
                             "link": source.link(spec, incident_at)})
    findings.sort(key=lambda f: -float(f["confidence"]))
    return {"findings": findings, "checked": checked, "missing": missing}


def summary_line(result: Evidence) -> str:
    """One line for the timeline and the transition's reason."""
    findings = result.get("findings") or []
    if findings:
        return "; ".join(str(f["summary"]) for f in findings)
    checked = ", ".join(result.get("checked") or []) or "no metric"
    return f"no significant change in {checked}"
