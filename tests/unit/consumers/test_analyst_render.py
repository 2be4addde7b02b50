"""How the findings fact reads in a case thread: the notifier's text for every chat sink."""

from __future__ import annotations

from core.consumers.notifier import render
from core.consumers.notifier_text import findings_text
from core.domain.messages import Topic

PAYLOAD = {
    "case_id": "c1", "version": 1, "checked": ["latency_p95_ms", "http_5xx_ratio"],
    "findings": [{"metric": "latency_p95_ms", "summary": "latency_p95_ms stepped up 222%",
                  "confidence": 0.99, "link": "http://prometheus:9090/graph?g0.expr=x"}],
    "missing": [],
    "similar_cases": [{"case_id": "c0", "title": "checkout slow after deploy",
                       "resolved_by": "Roll back checkout"}],
    "runbooks": [{"title": "Latency after a deploy", "path": "docs/runbooks/x.md"}],
}


def test_the_text_lists_findings_similar_cases_and_runbooks():
    assert findings_text(PAYLOAD).splitlines() == [
        "Analysis: 1 finding(s) in latency_p95_ms, http_5xx_ratio",
        "• latency_p95_ms stepped up 222% (confidence 99%)",
        "Similar: checkout slow after deploy (resolved by Roll back checkout)",
        "Runbook: Latency after a deploy"]
    assert render(Topic.ANALYSIS_FINDINGS, PAYLOAD) == (findings_text(PAYLOAD),)


def test_no_finding_says_so():
    quiet = {"checked": ["latency_p95_ms"], "findings": []}
    assert findings_text(quiet) == "Analysis: no significant change in latency_p95_ms"

