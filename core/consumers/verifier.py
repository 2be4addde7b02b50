"""The verifier (``cmd.verify.run``): judges the executed plan's ``verify`` block on what happened
after the change, one reading at a time (Prometheus, else the stand-in table of settings when
one is configured; allow-listed probes). A metric check with no source configured cannot be
judged (the ``plan_ready`` guard refuses it first); a verdict read from a stand-in table says so
first in its reason and records ``stand_in`` (the library never offers such a case as a fix). A
metric check reads only the series of the case's components (``core/evidence/prometheus.py``: a
value from no series of the component is no data); a passing reading of a block with metric
checks, none from a stand-in table, records ``series_read``: only such a verification teaches the
library a plan (``core/library``).

The change finished when the case entered VERIFYING (its ``updated_at``: notes do not move it).
Reading n notes what it saw, then:

- the block holds → ``verify_pass`` (→ CLOSED);
- it cannot be judged (an old plan past no guard, a refused probe) → ``verify_failed`` at once;
- not yet (a window after the change still running, or the condition not holding) and the
  block's deadline not reached → the note schedules reading n+1 ``OPSGATE_VERIFY_POLL_S`` later
  in the outbox (``deliver_after``), in the same transaction as the inbox mark: no thread sleeps,
  a restart loses nothing, other cases go on. Reading 1 also tells the thread what it waits on.
  A reading on which Prometheus timed out is not repeated at that pace: after k such readings
  in a row the next waits ``OPSGATE_VERIFY_POLL_S`` times 2^k, at most ``MAX_BACKOFF_S`` (and
  never past the deadline), and the note's reason says so;
- the deadline reached → ``verify_failed`` with the last reading.

Each reading is taken once through the gateway (``verify.evaluate``, keyed by case, version,
plan hash and reading number): a redelivery replays the reading, its time included, and so
reaches the note's own conclusion instead of contradicting it. A reading is ``Verifier.take``: the
consumer takes the one its command names, ``POST /verify/run`` the ``next_reading``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

from core.cases.replies import Reply
from core.cases.rows import case_components
from core.consumers.runs import CommandRun, current_run, noted
from core.db.case_store import as_utc
from core.domain.commands import NoteCase, Scheduled, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import (
    CommandPayload,
    Observation,
    Topic,
    VerifyReading,
    VerifyWaitingFacts,
    payload_as,
)
from core.domain.promql import Labels
from core.domain.verify import NO_METRICS_SOURCE, VerifyBlock, parse_verify, problem_lines
from core.domain.views import MovedCase
from core.errors import InvalidPlan, Unavailable
from core.evidence.configured import source_from_settings
from core.evidence.prometheus import CLIENT_GRACE_S
from core.evidence.reading import read_block
from core.evidence.scope import Moment, after_change, for_case
from core.evidence.sources import MetricSource
from core.evidence.stand_in import STAND_IN, StaticSource
from core.gateway import CallStatus, ToolCall
from core.messaging.consumer import Delivery
from core.metrics import VERIFY_SECONDS
from core.outbound.allowlists import UrlAllowList

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 10.0  # each probe (evidence.read_block's bound)
MAX_BACKOFF_S = 600.0
"""The longest wait between two readings after Prometheus timed out (or the poll, if longer)."""

@dataclass(frozen=True)
class Watch:
    """One verification: the block, when the change finished, and the last moment it may pass."""

    block: VerifyBlock
    since: datetime
    deadline: datetime
    window_ends: datetime  # the block's window after the change (``since`` when it has none)
    scope: str | None = None  # the case's tenant: what its Prometheus queries may select
    components: tuple[Labels, ...] = ()  # the metric labels of the case's components


@dataclass(frozen=True)
class Reading:
    """What one reading came to: the observation as its note records it, and the move it led
    to (``event`` None: the verification waits, its next reading scheduled)."""

    number: int
    observation: VerifyReading
    reason: str
    event: CaseEvent | None = None
    # The move's reply; None while waiting or when another moved it.
    moved: Reply[MovedCase] | None = None
    watch: Watch | None = None  # None: the block can never be judged


class Verifier:
    """Consumer of ``cmd.verify.run``."""

    name = "verifier"
    topics: tuple[str, ...] = (Topic.VERIFY_RUN,)

    def __init__(self, app: App, source: MetricSource | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.app = app
        settings = app.settings
        self.source = source or source_from_settings(settings)
        self.allowlist = UrlAllowList(settings.http_allowlist)
        self.clock = clock or app.cases.clock  # the clock that stamped the change's end
        self.poll = timedelta(seconds=settings.verify_poll_s)
        self.max_wait_s = settings.verify_max_wait_s
        self.scale = settings.verify_time_scale

    def handle(self, delivery: Delivery) -> None:
        payload = payload_as(CommandPayload, delivery.envelope.payload)
        run = current_run(self.app.cases, self.name, payload, CaseStatus.VERIFYING)
        if run is None:
            return
        number = int(payload.get("reading", 1))
        self.take(run, number, delivery.inbox_entry, timeouts=int(payload.get("timeouts", 0)))

    def next_reading(self, run: CommandRun) -> int:
        """The number of the run's next reading: one after the last a note of its case version
        records (by anyone: the verifier consumer, the REST walkthrough), else 1."""
        taken = [int(facts["reading"]) for event in ("verify_reading", "verify_result")
                 for facts in noted(self.app.cases, run, event, VerifyReading)
                 if "reading" in facts]  # notes from before readings were numbered lack it
        return max(taken, default=0) + 1

    def take(self, run: CommandRun, number: int,
             inbox_entry: tuple[str, int] | None = None, *, timeouts: int = 0) -> Reading:
        """Reading ``number`` of the run's verification and what it leads to (see the module
        docstring), noted and moved as the run's actor; ``timeouts``: the readings in a row
        before it on which Prometheus timed out."""
        watch = self._watch(run)
        if isinstance(watch, str):
            return self._conclude(run, inbox_entry, number, _observation("cannot", watch),
                                  watch, None)
        observation = self._read(run, watch, number)
        state, reason = observation["state"], str(observation["reason"])
        if state == "pending" and _at(observation) < watch.deadline:
            return self._wait(run, inbox_entry, watch, number, observation, timeouts)
        if state == "pending":
            reason = (f"{reason}; still so at the deadline {watch.deadline:%H:%M:%S} UTC, "
                      f"reading {number}")
        return self._conclude(run, inbox_entry, number, observation, reason, watch)

    # -- the verification -----------------------------------------------------------------

    def _watch(self, run: CommandRun) -> Watch | str:
        """The verification the run asks for, or why the block can never be judged."""
        if run.plan is None:
            return f"cannot verify: the plan {run.plan_hash} is not stored"
        raw = run.plan.get("verify")
        try:
            block = parse_verify(raw)
        except InvalidPlan:
            return f"cannot verify: {'; '.join(problem_lines(raw))}"
        if block.reads_metrics and self.source is None:
            return f"cannot verify: {NO_METRICS_SOURCE}"
        wait_s = block.wait_s(scale=self.scale, max_wait_s=self.max_wait_s)
        if block.window_s * self.scale > wait_s:
            return (f"cannot verify: the {block.window_s * self.scale:g}s window after the change "
                    f"outlasts the longest wait, {wait_s:g}s (OPSGATE_VERIFY_MAX_WAIT_S)")
        since = as_utc(datetime.fromisoformat(str(run.case["updated_at"])))
        return Watch(block, since, since + timedelta(seconds=wait_s),
                     since + timedelta(seconds=block.window_s * self.scale),
                     scope=str(run.case["tenant"]),
                     components=self.app.cases.gate.metric_scope(case_components(run.case)))

    def _read(self, run: CommandRun, watch: Watch, number: int) -> Observation:
        """Reading ``number``, taken once through the gateway: metrics move, so a redelivery
        must reuse the reading its note shows rather than take a new one."""
        assert run.plan is not None
        check_s = max(CHECK_TIMEOUT_S, self.app.settings.promql_timeout_s + CLIENT_GRACE_S)
        lease_s = max(self.app.settings.gateway_lease_s,
                      15.0 + check_s * len(watch.block.checks))
        call = ToolCall(tool="verify.evaluate", actor=run.consumer, session_id=run.session_id,
                        args={"verify": run.plan.get("verify"), "reading": number,
                              "since": watch.since.isoformat()},
                        business_key=f"{run.case_id}:{run.plan_hash}:{run.version}:verify:"
                                     f"{number}")
        result = self.app.gateway.run(call, lambda _args: self._evaluate(watch),
                                      lease_s=lease_s, wait_s=lease_s, idempotent=True)
        if result.status is CallStatus.IN_PROGRESS:
            raise Unavailable("verification of this case is running elsewhere; retry later",
                              key=result.key)
        if result.error is not None or not isinstance(result.result, Mapping):
            why = (result.error or {}).get("message", "no stored observation")
            return _observation("cannot", f"cannot verify: {why}", at=self.clock())
        return cast(Observation, dict(result.result))  # as _evaluate returned it first

    def _evaluate(self, watch: Watch) -> Observation:
        started, at = time.monotonic(), self.clock()
        # Never read without a source: _watch refused a metric check then, so none is read.
        source = for_case(after_change(self.source or StaticSource({}), watch.since), watch.scope,
                          watch.components)
        try:
            outcome = read_block(watch.block, source, self.allowlist,
                                 Moment(at=at, since=watch.since, scale=self.scale),
                                 timeout_s=CHECK_TIMEOUT_S)
        finally:
            VERIFY_SECONDS.observe(time.monotonic() - started)
        stand_in = watch.block.reads_metrics and isinstance(self.source, StaticSource)
        reason = f"{STAND_IN}: {outcome.reason}" if stand_in else outcome.reason
        found = _observation(outcome.state, reason, outcome.observed, at=at,
                             waiting_for=outcome.waiting_for, stand_in=stand_in,
                             timed_out=outcome.timed_out)
        if outcome.passed and watch.block.reads_metrics and not stand_in:
            found["series_read"] = True  # each metric value came from the component's series
        return found

    # -- what a reading leads to ----------------------------------------------------------

    def _wait(self, run: CommandRun, inbox_entry: tuple[str, int] | None, watch: Watch,
              number: int, observation: Observation, timeouts: int = 0) -> Reading:
        """Note the reading and schedule the next, in one transaction with the inbox mark."""
        at = _at(observation)
        timeouts = timeouts + 1 if observation.get("timed_out") else 0
        pause = self.pause(timeouts)
        following = min(at + pause, watch.deadline)  # the last reading is at the deadline
        reason = str(observation["reason"])
        if timeouts:
            reason = f"{reason}. {_backing_off(timeouts, pause, self.poll)}"
        meta: VerifyWaitingFacts = {
            **observation, "plan_hash": run.plan_hash, "reading": number,
            "since": watch.since.isoformat(), "deadline": watch.deadline.isoformat(),
            "next_reading_at": following.isoformat()}
        command: dict[str, object] = {"plan_hash": run.plan_hash, "reading": number + 1}
        if timeouts:
            meta["timeouts"] = command["timeouts"] = timeouts
        schedule = Scheduled(Topic.VERIFY_RUN, command, following)
        note = NoteCase(run.case_id, "verify_reading", run.consumer, reason=reason, meta=meta,
                        topic=Topic.VERIFY_WAITING if number == 1 else None,
                        schedule=schedule)
        self.app.cases.note(note, self._key(run, number), inbox_entry=inbox_entry).data()
        return Reading(number, meta, reason, watch=watch)

    def pause(self, timeouts: int) -> timedelta:
        """How long after a reading the next is taken: the poll, doubled for each reading in a
        row that timed out, at most ``MAX_BACKOFF_S`` (or the poll, if longer)."""
        if not timeouts:
            return self.poll
        longest = max(self.poll, timedelta(seconds=MAX_BACKOFF_S))
        return min(self.poll * (1 << min(timeouts, 32)), longest)

    def _conclude(self, run: CommandRun, inbox_entry: tuple[str, int] | None, number: int,
                  observation: Observation, reason: str, watch: Watch | None) -> Reading:
        meta: VerifyReading = {**observation, "plan_hash": run.plan_hash, "reading": number}
        self.app.cases.note(NoteCase(run.case_id, "verify_result", run.consumer, reason=reason,
                                     meta=meta),
                            self._key(run, number)).data()
        passed = observation["state"] == "held"
        event = CaseEvent.VERIFY_PASS if passed else CaseEvent.VERIFY_FAILED
        moved = self._move(run, inbox_entry, number, event, reason,
                           stand_in=bool(observation.get("stand_in")))
        return Reading(number, meta, reason, event, moved, watch)

    def _move(self, run: CommandRun, inbox_entry: tuple[str, int] | None, number: int,
              event: CaseEvent, reason: str, *, stand_in: bool = False) -> Reply[MovedCase] | None:
        meta = {"plan_hash": run.plan_hash, "reading": number}
        cmd = TransitionCase(run.case_id, event, actor=run.consumer, reason=reason,
                             meta={**meta, "stand_in": True} if stand_in else meta,
                             expected_version=run.version)
        reply = self.app.cases.transition(cmd, f"{self._key(run, number)}:{event}",
                                          inbox_entry=inbox_entry)
        if reply.moved_on:
            log.info("verifier: case %s moved on before %s (%s)", run.case_id, event, reply.body)
            return None
        reply.data()
        return reply

    @staticmethod
    def _key(run: CommandRun, number: int) -> str:
        return f"{run.key}:{run.plan_hash}:reading:{number}"


def _backing_off(timeouts: int, pause: timedelta, poll: timedelta) -> str:
    """Why the next reading waits longer than the poll, in a sentence."""
    how_often = "on this reading" if timeouts == 1 else f"on {timeouts} readings in a row"
    return (f"Prometheus timed out {how_often}, so the next reading waits "
            f"{pause.total_seconds():g}s instead of {poll.total_seconds():g}s")


def _at(observation: Observation) -> datetime:
    return as_utc(datetime.fromisoformat(str(observation["at"])))


def _observation(state: str, reason: str, observed: float | None = None, *,
                 at: datetime | None = None, waiting_for: str | None = None,
                 stand_in: bool = False, timed_out: bool = False) -> Observation:
    # NaN and infinities are not JSON: the ledger and the timeline could not store them.
    value = observed if observed is not None and math.isfinite(observed) else None
    found: Observation = {"state": state, "passed": state == "held", "reason": reason,
                          "observed": value}
    if at is not None:
        found["at"] = at.isoformat()
    if waiting_for is not None:
        found["waiting_for"] = waiting_for
    if stand_in:
        found["stand_in"] = True
    if timed_out:
        found["timed_out"] = True
    return found
