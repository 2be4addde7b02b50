"""The verifier (``cmd.verify.run``): judges the executed plan's ``verify`` block against the
configured evidence (Prometheus, else the static metrics of settings; allow-listed probes), notes
the observation, then ``verify_pass`` (→ CLOSED) or ``verify_failed`` (→ PARKED, with why)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from core.consumers.runs import PlanRun, current_run
from core.domain.commands import NoteCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.errors import Unavailable
from core.executor.allowlists import UrlAllowList
from core.executor.evidence import MetricSource, evaluate, source_from_settings
from core.gateway import CallStatus, ToolCall
from core.messaging.consumer import Delivery
from core.metrics import VERIFY_SECONDS

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 10.0  # each metric query or probe (evidence.evaluate's bound)


class Verifier:
    """Consumer of ``cmd.verify.run``."""

    name = "verifier"
    topics: tuple[str, ...] = (Topic.VERIFY_RUN,)

    def __init__(self, app: App, source: MetricSource | None = None) -> None:
        self.app = app
        settings = app.settings
        self.source = source or source_from_settings(settings, settings.static_metrics)
        self.allowlist = UrlAllowList(settings.http_allowlist)

    def handle(self, delivery: Delivery) -> None:
        run = current_run(self.app.cases, self.name, delivery.envelope.payload,
                          CaseStatus.VERIFYING)
        if run is None:
            return
        observation = self._observe(run)
        passed = bool(observation["passed"])
        self.app.cases.note(NoteCase(run.case_id, "verify_result", self.name,
                                     reason=str(observation["reason"]),
                                     meta={**observation, "plan_hash": run.plan_hash}),
                            f"{run.key}:observation").data()
        self._conclude(run, delivery, passed, str(observation["reason"]))

    def _conclude(self, run: PlanRun, delivery: Delivery, passed: bool, reason: str) -> None:
        event = CaseEvent.VERIFY_PASS if passed else CaseEvent.VERIFY_FAILED
        cmd = TransitionCase(run.case_id, event, actor=self.name, reason=reason,
                             meta={"plan_hash": run.plan_hash}, expected_version=run.version)
        reply = self.app.cases.transition(cmd, f"{run.key}:{event}",
                                          inbox_entry=delivery.inbox_entry)
        if reply.status in (409, 412):
            log.info("verifier: case %s moved on before %s (%s)", run.case_id, event, reply.body)
            return
        reply.data()

    def _observe(self, run: PlanRun) -> dict[str, Any]:
        """The evaluation, recorded once through the gateway: metrics move, so a redelivery
        must reuse the first reading rather than judge again and contradict its own note."""
        if run.plan is None:
            return _observation(False, f"cannot verify: the plan {run.plan_hash} is not stored")
        block = run.plan.get("verify")
        checks = block.get("checks") if isinstance(block, Mapping) else None
        count = len(checks) if isinstance(checks, list) else 1
        lease_s = max(self.app.settings.gateway_lease_s, 15.0 + CHECK_TIMEOUT_S * count)
        call = ToolCall(tool="verify.evaluate", args={"verify": block}, actor=self.name,
                        session_id=run.session_id,
                        business_key=f"{run.case_id}:{run.plan_hash}:{run.version}:verify")
        result = self.app.gateway.run(call, self._evaluate, lease_s=lease_s, wait_s=lease_s,
                                      idempotent=True)
        if result.status is CallStatus.IN_PROGRESS:
            raise Unavailable("verification of this case is running elsewhere; retry later",
                              key=result.key)
        if result.error is not None or not isinstance(result.result, Mapping):
            why = (result.error or {}).get("message", "no stored observation")
            return _observation(False, f"cannot verify: {why}")
        return dict(result.result)

    def _evaluate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        try:
            outcome = evaluate(args.get("verify"), self.source, self.allowlist,
                               timeout_s=CHECK_TIMEOUT_S)
        finally:
            VERIFY_SECONDS.observe(time.monotonic() - started)
        return _observation(outcome.passed, outcome.reason, outcome.observed)


def _observation(passed: bool, reason: str, observed: float | None = None) -> dict[str, Any]:
    # NaN and infinities are not JSON: the ledger and the timeline could not store them.
    value = observed if observed is not None and math.isfinite(observed) else None
    return {"passed": passed, "reason": reason, "observed": value}
