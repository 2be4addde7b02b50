"""How the findings fact reads in a case thread: text for every chat sink, Block Kit for Slack."""

from __future__ import annotations

from core.analysis.render import findings_blocks, findings_text
from core.consumers.notifier import render
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
    assert render(Topic.ANALYSIS_FINDINGS, PAYLOAD) == findings_text(PAYLOAD)


def test_no_finding_says_so():
    quiet = {"checked": ["latency_p95_ms"], "findings": []}
    assert findings_text(quiet) == "Analysis: no significant change in latency_p95_ms"


def test_the_blocks_link_each_finding_to_its_query():
    header, finding, context = findings_blocks(PAYLOAD)
    assert header["text"]["text"].startswith("*Analysis: 1 finding(s)")
    assert finding["accessory"]["url"] == "http://prometheus:9090/graph?g0.expr=x"
    assert [e["text"] for e in context["elements"]] == [
        "Similar: checkout slow after deploy (resolved by Roll back checkout)",
        "Runbook: Latency after a deploy"]
    recorded = {**PAYLOAD, "findings": [{**PAYLOAD["findings"][0], "link": "file:///x.json"}],
                "similar_cases": [], "runbooks": []}
    assert [b.get("accessory") for b in findings_blocks(recorded)] == [None, None]
