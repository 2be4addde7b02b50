"""The analyst consumer on real SQLite and PostgreSQL: findings from Debian's real Prometheus on
127.0.0.1 (its ``query_range`` over the recorded series, written as history by promtool) are
noted on the case (``evt.analysis.findings.v1`` in the outbox, ``evidence_link`` rows) in one
transaction, then the case goes on to planning; a redelivery after a crash reads nothing again
and writes nothing twice; with no metric source the case goes on at once, as before; and the
whole loop, analyst and verifier, reads the same real Prometheus."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import func, select

from core.analysis.store import case_findings
from core.analysis.tables import evidence_link
from core.cases.service import CaseService
from core.clock import utcnow
from core.consumers.analyst import NO_ANALYST, Analyst
from core.db.tables import outbox
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.errors import Unavailable
from core.evidence.prometheus import PrometheusSource
from core.evidence.sources import EvidenceMissing
from core.messaging.consumer import ConsumerRunner
from tests.support.cases import command, key, open_case
from tests.support.peers import Prometheus
from tests.support.plan_runs import envelope_of, make_app, notes, status

SERIES = Path(__file__).parents[2] / "fixtures" / "series"
FINDINGS = "evt.analysis.findings.v1"


def analyzing_case(app, title: str) -> UUID:
    case_id = open_case(app.cases, title)
    assert app.cases.transition(command(case_id, CaseEvent.START_ANALYSIS), key()).ok
    return case_id


def analyse(app, case_id: UUID, analyst: Analyst | None = None) -> str:
    runner = ConsumerRunner(app.engine, analyst or Analyst(app), sleep=lambda _s: None)
    return runner.deliver(envelope_of(app.engine, case_id, Topic.ANALYSIS_RUN))


def findings_events(engine, case_id: UUID) -> list[dict[str, Any]]:
    query = select(outbox.c.payload).where(outbox.c.topic == FINDINGS,
                                           outbox.c.key == str(case_id))
    with engine.connect() as conn:
        return [dict(p) for p in conn.execute(query).scalars()]


def evidence_rows(engine, case_id: UUID) -> int:
    query = select(func.count()).select_from(evidence_link).where(
        evidence_link.c.case_id == case_id)
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


COMPONENT = 'job="checkout"'
"""The label of every recorded series: the component the cases concern (the default scope)."""


def recorded_history(folder: Path, origin: float, prefix: str = "recorded_") -> str:
    """OpenMetrics for promtool: each recorded series of ``folder`` as the gauge
    ``<prefix><metric>``, its point ``t`` at ``origin + t``."""
    lines = []
    for file in sorted(folder.glob("*.json")):
        recorded = json.loads(file.read_text())
        lines.append(f"# TYPE {prefix}{recorded['metric']} gauge")
        lines += [f'{prefix}{recorded["metric"]}{{{COMPONENT}}} {value} {origin + t:.3f}'
                  for t, value in recorded["points"]]
    return "\n".join([*lines, "# EOF", ""])


def recorded_app(engine, prometheus_server, folder: Path, prefix: str = "recorded_",
                 **settings: Any):
    """An app whose analyst reads ``folder``'s recorded series from a real Prometheus that
    holds them around ``INCIDENT_AGO_S`` before now (each metric's query: its gauge, named
    ``<prefix><metric>``; a verify check reads a metric by its gauge's name)."""
    names = [json.loads(f.read_text())["metric"] for f in sorted(folder.glob("*.json"))]
    prometheus = prometheus_server([], history=recorded_history(
        folder, time.time() - INCIDENT_AGO_S, prefix))
    return make_app(engine, prometheus_url=prometheus.base_url,
                    metric_catalog={name: {"query": f"{prefix}{name}"} for name in names},
                    **settings)


def test_a_latency_step_is_noted_with_its_evidence_then_the_case_plans(engine,
                                                                       prometheus_server):
    app = recorded_app(engine, prometheus_server, SERIES / "latency_step")
    case_id = case_opened_at_the_spike(app, "checkout p95 latency over 2 s")
    assert analyse(app, case_id) == "done"

    assert status(app, case_id) == CaseStatus.PLANNING
    [note] = notes(app, case_id, "analysis_findings")
    [finding] = note["context"]["findings"]
    assert finding["metric"] == "latency_p95_ms" and finding["statistic"] == "shift"
    assert note["reason"].startswith("latency_p95_ms stepped up")
    [event] = findings_events(engine, case_id)
    assert event["findings"] == note["context"]["findings"] and event["version"] == 1
    assert case_findings(engine, case_id) == [finding]
    done = [row for row in app.cases.timeline(case_id) if row["event"] == "analysis_done"]
    assert done[0]["reason"] == note["reason"]
    assert done[0]["meta"]["context"] == {"analyst": "metrics", "findings": 1}


def test_a_flat_series_notes_that_nothing_changed(engine, prometheus_server):
    app = recorded_app(engine, prometheus_server, SERIES / "flat")
    case_id = case_opened_at_the_spike(app, "checkout p95 latency over 2 s")
    assert analyse(app, case_id) == "done"
    [note] = notes(app, case_id, "analysis_findings")
    assert note["context"]["findings"] == []
    assert note["reason"] == "no significant change in latency_p95_ms"
    assert evidence_rows(engine, case_id) == 0
    assert status(app, case_id) == CaseStatus.PLANNING


def test_without_a_metric_source_the_case_plans_at_once(engine):
    app = make_app(engine)
    case_id = analyzing_case(app, "checkout p95 latency over 2 s")
    assert analyse(app, case_id) == "done"
    assert status(app, case_id) == CaseStatus.PLANNING
    assert notes(app, case_id, "analysis_findings") == []
    assert findings_events(engine, case_id) == []
    [done] = [row for row in app.cases.timeline(case_id) if row["event"] == "analysis_done"]
    assert done["reason"] == NO_ANALYST


class CrashingOnce:
    """The case service, except that the first transition fails as if the process died."""

    def __init__(self, cases: CaseService) -> None:
        self._cases = cases
        self.crashed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cases, name)

    def transition(self, *args: Any, **kwargs: Any) -> Any:
        if not self.crashed:
            self.crashed = True
            raise Unavailable("the process died before analysis_done")
        return self._cases.transition(*args, **kwargs)


def test_a_redelivery_after_a_crash_reuses_the_first_reading_and_writes_once(
        engine, prometheus_server):
    prometheus = spiked_prometheus(prometheus_server)
    app = make_app(engine, prometheus_url=prometheus.base_url)
    analyst = Analyst(app)
    analyst.cases = CrashingOnce(app.cases)  # type: ignore[assignment]
    case_id = case_opened_at_the_spike(app, "HighErrorRate on checkout")
    assert analyse(app, case_id, analyst) == "done"  # the runner retried after the crash

    assert analyst.cases.crashed and status(app, case_id) == CaseStatus.PLANNING
    [read] = prometheus.queries()  # the server's own query log: http_5xx_ratio, read once
    assert read["query"].startswith('sum(rate(http_requests_total{code=~"5.."}')
    assert len(notes(app, case_id, "analysis_findings")) == 1
    assert len(findings_events(engine, case_id)) == 1
    assert evidence_rows(engine, case_id) == 1
    assert analyse(app, case_id) == "duplicate"  # the inbox saw the message


INCIDENT_AGO_S = 1800  # the analyst's window after the start (OPSGATE_ANALYSIS_AFTER_S)


def error_history(origin: float) -> str:
    """OpenMetrics for promtool: ``http_requests_total`` counters (a sample every 15 s) whose 5xx
    share follows the recorded error spike, its point ``t`` at ``origin + t``."""
    recorded = json.loads((SERIES / "error_spike" / "http_5xx_ratio.json").read_text())
    moments = [(origin + t + 15 * k, ratio) for t, ratio in recorded["points"] for k in range(4)]
    lines = []
    for code, share in (("500", lambda r: r), ("200", lambda r: 1 - r)):
        count = 0.0
        for at, ratio in moments:
            count += 100 * share(ratio)
            lines.append(f'http_requests_total{{code="{code}"}} {count:.3f} {at:.3f}')
    return "\n".join([*lines, "# EOF", ""])


def spiked_prometheus(prometheus_server, **options) -> Prometheus:
    """A real Prometheus holding the recorded spike around ``INCIDENT_AGO_S`` before now."""
    return prometheus_server([], history=error_history(time.time() - INCIDENT_AGO_S), **options)


def case_opened_at_the_spike(app, title: str) -> UUID:
    """A case whose incident started ``INCIDENT_AGO_S`` ago (its clock set back), so the
    recorded half hour after the start is already in Prometheus."""
    app.cases.clock = lambda: utcnow() - timedelta(seconds=INCIDENT_AGO_S)
    return analyzing_case(app, title)


def instant(moment: str) -> float:
    return datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp()


def test_prometheus_query_range_is_read_around_the_case_start(engine, prometheus_server):
    prometheus = spiked_prometheus(prometheus_server)
    app = make_app(engine, prometheus_url=prometheus.base_url)
    case_id = case_opened_at_the_spike(app, "HighErrorRate on checkout")
    assert analyse(app, case_id) == "done"

    [seen] = prometheus.queries()  # the server's own query log
    assert seen["query"].startswith('sum(rate(http_requests_total{code=~"5.."}')
    assert seen["step"] == 60
    assert instant(seen["end"]) > instant(seen["start"]) + 3600
    [note] = notes(app, case_id, "analysis_findings")
    [finding] = note["context"]["findings"]
    assert finding["statistic"] == "error_ratio" and finding["current"] > 0.05
    assert finding["link"].startswith(prometheus.base_url + "/graph?g0.expr=")
    assert status(app, case_id) == CaseStatus.PLANNING


def test_prometheus_credentials_are_sent_but_never_shown(engine, prometheus_server):
    prometheus = spiked_prometheus(prometheus_server, basic_auth=("reader", "s3cret"))
    with pytest.raises(EvidenceMissing, match=r"HTTP 401"):  # it answers only with them
        PrometheusSource(prometheus.base_url).read("1")
    secret_url = prometheus.base_url.replace("http://", "http://reader:s3cret@")
    app = make_app(engine, prometheus_url=secret_url)
    case_id = case_opened_at_the_spike(app, "HighErrorRate on checkout")
    assert analyse(app, case_id) == "done"

    assert len(prometheus.queries()) == 1  # answered: the credentials were sent
    [note] = notes(app, case_id, "analysis_findings")
    [finding] = note["context"]["findings"]
    assert finding["link"].startswith(prometheus.base_url + "/graph?g0.expr=")
    with engine.connect() as conn:
        links = [dict(row) for row in conn.execute(select(evidence_link)).mappings()]
    shown = json.dumps([app.cases.timeline(case_id), findings_events(engine, case_id), links],
                       default=str)
    assert "s3cret" not in shown and "reader" not in shown


def test_an_unreachable_prometheus_is_noted_and_the_case_still_plans(engine):
    app = make_app(engine, prometheus_url="http://127.0.0.1:9")
    case_id = analyzing_case(app, "HighErrorRate on checkout")
    assert analyse(app, case_id) == "done"
    [note] = notes(app, case_id, "analysis_findings")
    [missing] = note["context"]["missing"]
    assert missing["metric"] == "http_5xx_ratio" and "unreachable" in missing["reason"]
    assert status(app, case_id) == CaseStatus.PLANNING


def test_in_the_loop_findings_reach_the_thread_and_the_closed_case_the_library(
        sqlite_engine, prometheus_server):
    """The whole loop reads the real Prometheus: the analyst the recorded latency step, the
    verifier the recorded error ratio after the (auto-approved, no-op) change."""
    from core.domain.commands import OpenCase
    from core.library import Library
    from core.loop import InProcessLoop

    app = recorded_app(sqlite_engine, prometheus_server, SERIES / "latency_step", prefix="",
                       auto_approve="noop_only", verify_poll_s=0.2,
                       default_metric_labels="job=checkout",  # its checks read its series
                       # a 60 s window read as 3 s: Prometheus' subquery steps are 1 s apart
                       verify_time_scale=0.05)
    app.cases.clock = lambda: utcnow() - timedelta(seconds=INCIDENT_AGO_S)  # at the step
    try:
        with InProcessLoop(app) as loop:
            reply = app.cases.open_case(OpenCase(title="checkout p95 latency over 2 s",
                                                 actor="pagerduty"), "open-loop")
            case_id = UUID(reply.data()["case_id"])
            assert loop.wait_for(lambda: status(app, case_id) == CaseStatus.CLOSED, 30)
            assert loop.wait_for(lambda: loop.unpublished() == 0, 10)
            library = Library(app.engine)
            assert loop.wait_for(lambda: bool(library.similar_cases("checkout latency")), 10)
    finally:
        app.gateway.close()
    posts = app.chat.thread(str(case_id))
    assert any(p.startswith("Analysis: 1 finding(s) in latency_p95_ms") for p in posts), posts
    [similar] = library.similar_cases("checkout latency")
    assert similar["case_id"] == str(case_id)
    assert similar["findings"][0].startswith("latency_p95_ms stepped up")
