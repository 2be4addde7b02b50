"""The analyst (``cmd.analysis.run``): reads the metrics the case names around its start
(Prometheus ``query_range``, or the recorded series of ``OPSGATE_SERIES_DIR``), turns them into
findings, recalls similar closed cases and relevant runbooks, notes all of it on the case
(``evt.analysis.findings.v1`` and ``evidence_link`` rows, one transaction), then
``analysis_done`` → PLANNING.

The evidence is gathered once per case version through the gateway: metrics move and the
library grows, so a redelivery must reuse the first reading rather than note a different one.
With no metric source there is no note: the case goes on to planning at once, the move's reason
naming any similar past case."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from sqlalchemy import Connection

from core.analysis.catalog import catalog, metrics_for
from core.analysis.findings import find, summary_line
from core.analysis.sources import SeriesSource, for_case, series_source
from core.analysis.store import write_findings
from core.consumers.runs import CommandRun, current_run, move_case
from core.domain.commands import NoteCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import CommandPayload, Evidence, FindingsFacts, Topic, payload_as
from core.errors import Unavailable
from core.evidence.prometheus import CLIENT_GRACE_S
from core.gateway import CallStatus, ToolCall, ToolCallFailed
from core.investigate.looks import CaseLooks
from core.investigate.scope import DEFAULT, Target
from core.investigate.sources import case_looks
from core.investigate.words import change_line
from core.library import Library
from core.library.runbooks import runbooks_folder
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App

NO_ANALYST = ("no metric source (OPSGATE_PROMETHEUS_URL, OPSGATE_SERIES_DIR) and nothing "
               "similar in the library: planning from the template catalog")
FINDINGS_EVENT = "analysis_findings"


class Analyst:
    """Consumer of ``cmd.analysis.run``: ANALYZING → PLANNING, with the evidence noted first."""

    name = "analyst"
    topics: tuple[str, ...] = (Topic.ANALYSIS_RUN,)

    def __init__(self, app: App, source: SeriesSource | None = None,
                 library: Library | None = None) -> None:
        self.app = app
        self.cases = app.cases
        self.source = source or series_source(app.settings)
        self.library = library or app.library
        self.specs = catalog(app.settings.metric_catalog)
        self.runbooks_dir = app.settings.runbooks_dir

    def handle(self, delivery: Delivery) -> None:
        payload = payload_as(CommandPayload, delivery.envelope.payload)
        run = current_run(self.cases, self.name, payload, CaseStatus.ANALYZING,
                          with_plan=False)
        if run is None:
            return
        correlation_id = payload.get("correlation_id")
        evidence = self._gather(run)
        similar = [str(c["case_id"]) for c in evidence.get("similar_cases", [])]
        reason = _with_similar(NO_ANALYST, evidence)
        meta: dict[str, Any] = {"analyst": "none", **({"similar_cases": similar} if similar
                                                       else {})}
        if evidence["source"] != "none":
            reason = summary_line(evidence)
            meta = {"analyst": "metrics", "findings": len(evidence["findings"])}
            self._note(run, evidence, reason, correlation_id)
        if evidence.get("looked"):
            reason = "; ".join([reason, *evidence.get("looked", [])])
        cmd = TransitionCase(run.case_id, CaseEvent.ANALYSIS_DONE, actor=self.name,
                             reason=reason, meta=meta, correlation_id=correlation_id,
                             expected_version=run.version)
        move_case(self.cases, run, cmd, delivery.inbox_entry)

    def _gather(self, run: CommandRun) -> FindingsFacts:
        """The findings and the recall, computed once per case version (the gateway stores the
        first result; a redelivery replays it)."""
        specs = metrics_for(str(run.case["title"]), self.specs)
        read_s = self.app.settings.promql_timeout_s + CLIENT_GRACE_S  # each metric's query_range
        lease_s = max(self.app.settings.gateway_lease_s, 15.0 + read_s * len(specs))
        call = ToolCall(tool="analysis.gather",
                        args={"title": run.case["title"], "metrics": [s.name for s in specs],
                              "incident_at": run.case["created_at"],
                              "case_id": str(run.case_id)},
                        actor=self.name, session_id=run.session_id,
                        business_key=f"{run.case_id}:{run.version}:analysis")
        scope = str(run.case["tenant"])  # what its Prometheus queries may select

        def evidence(args: Mapping[str, Any]) -> FindingsFacts:
            return self._evidence(args, scope)

        result = self.app.gateway.run(call, evidence, lease_s=lease_s, wait_s=lease_s,
                                      idempotent=True)
        if result.status is CallStatus.IN_PROGRESS:
            raise Unavailable("analysis of this case is running elsewhere; retry later",
                              key=result.key)
        result.raise_for_error(f"analysis of case {run.case_id}")
        if not isinstance(result.result, Mapping):
            raise ToolCallFailed(f"analysis of case {run.case_id}: no evidence kept",
                                 key=result.key, result=result.result)
        # The evidence _evidence returned, as the gateway kept it (the first run's, on a replay).
        return cast(FindingsFacts, dict(result.result))

    def _evidence(self, args: Mapping[str, Any], scope: str) -> FindingsFacts:
        title = str(args["title"])
        found: Evidence = {"findings": [], "checked": [], "missing": []}
        source = "none"
        if self.source is not None:
            specs = [self.specs[name] for name in args["metrics"] if name in self.specs]
            incident_at = datetime.fromisoformat(str(args["incident_at"]))
            found = find(specs, for_case(self.source, scope), incident_at)
            source = type(self.source).__name__
        if self.runbooks_dir:
            self.library.index_runbooks(runbooks_folder(self.runbooks_dir))
        recall = self.library.recall(title, exclude=UUID(str(args["case_id"])))
        facts = cast(FindingsFacts, {**found, "source": source, **recall})
        looked = looked_at(self.app, UUID(str(args["case_id"])))
        if looked:
            facts["looked"] = looked
        return facts

    def _note(self, run: CommandRun, evidence: FindingsFacts, reason: str,
              correlation_id: str | None) -> None:
        findings = list(evidence["findings"])

        def evidence_rows(conn: Connection) -> None:
            write_findings(conn, run.case_id, run.version, findings)

        note = NoteCase(run.case_id, FINDINGS_EVENT, self.name, reason=reason, meta=evidence,
                        topic=Topic.ANALYSIS_FINDINGS, correlation_id=correlation_id)
        self.cases.note(note, f"{run.key}:findings", also=evidence_rows).data()


def looked_at(app: App, case_id: UUID) -> list[str]:
    """What the looks at the case's components find before any plan: the last change of each
    before the case opened and its firing alerts, one line each (a source that is missing or
    down says nothing)."""
    case = app.cases.get_case(case_id)
    looks = case_looks(case, app.catalog.current(), app.settings, app.engine)
    lines: list[str] = []
    for target in looks.scope.targets:
        lines += _last_change(looks, target) + _firing(looks, target)
    return lines


def _last_change(looks: CaseLooks, target: Target) -> list[str]:
    changes = looks.sources.changes
    if changes is None or target.name == DEFAULT:
        return []
    try:
        found = changes.last_before([target.name], [target.workload or target.name],
                                    looks.opened_at)  # as the card finds it
    except Unavailable:
        return []
    return [f"last change before the case: {change_line(found)}"] if found else []


def _firing(looks: CaseLooks, target: Target) -> list[str]:
    alerts = looks.sources.alerts
    if alerts is None or not target.metric_labels:
        return []
    try:
        listed = alerts.alerts(target).get("alerts") or []
    except Unavailable:
        return []
    firing = [f"{a.get('alertname')} ({a.get('severity') or 'no severity'})" for a in listed
              if a.get("state") == "active"]
    return [f"{len(firing)} alert(s) firing for {target.name}: {', '.join(firing[:5])}"] \
        if firing else []


def _with_similar(reason: str, evidence: Mapping[str, Any]) -> str:
    """Without a metric source there is no findings note: the move's reason names the similar
    past cases, so the thread still shows them."""
    similar = evidence.get("similar_cases") or []
    if not similar:
        return reason
    told = "; ".join(f"{c['title']} (resolved by {c.get('resolved_by') or 'its plan'})"
                     for c in similar)
    return f"{reason}; similar past cases: {told}"
