"""``opsgate reconcile``: the ledger and the outbox checked against each other and against the
cases. Finds gateway calls stuck in progress past their lease, calls whose outcome is unknown
(they finished after losing their lease: a person checks the target), outbox rows unpublished past a
bound, published messages a consumer has not recorded past the delivery bound, consumers' dead
letters, and cases whose status or version disagrees with the fold of their timeline.
``repair`` does only what cannot repeat a side effect: send stale and undelivered outbox rows
again (consumers dedup on the message id), release expired claims of calls declared safe to run
again, and drop expired session locks. Everything else is left for a person, with what to do."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, select, update

from core.cases.timeline import entry_of
from core.clock import Clock
from core.db.case_store import as_utc
from core.db.database import transaction
from core.db.tables import case_timeline, ops_case, session_lock, tool_call_ledger
from core.domain.fsm import CaseEvent, fold
from core.domain.targets import step_target
from core.gateway.keys import case_of_session
from core.gateway.ledger import Ledger, LedgerEntry, LedgerState
from core.messaging import inbox, outbox
from core.messaging.bus import Bus
from core.messaging.consumer import HELD
from core.messaging.delivery import Late, Subscribers, look, send_again, subscribers
from core.messaging.relay import OutboxRelay
from core.steps.runner import step_named_by

SAFE_TO_RUN_AGAIN = frozenset({"step.noop", "verify.evaluate"})
"""Tools whose executors the gateway runs as idempotent: a second run changes nothing."""

STEP_NOTES = ("step_result", "rollback_result")
"""The timeline notes of step attempts: one per gateway call of a plan or rollback step."""

@dataclass(frozen=True)
class Finding:
    """One inconsistency: its kind, what it concerns, why it matters, and what was done."""

    # stuck_call | unknown_outcome | unrecorded_result | stale_outbox | undelivered |
    # dead_letter | held_post | status_mismatch | expired_lock
    kind: str
    subject: str
    detail: str
    advice: str
    repaired: str | None = None
    about: dict[str, str] = field(default_factory=dict)  # names for machines: case, step, …

    def line(self) -> str:
        done = f" — REPAIRED: {self.repaired}" if self.repaired else f" — {self.advice}"
        return f"{self.kind:<16} {self.subject}: {self.detail}{done}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def repaired(self) -> list[Finding]:
        return [f for f in self.findings if f.repaired]

    def as_dict(self) -> dict[str, Any]:
        return {"clean": self.clean, "findings": [vars(f) for f in self.findings]}


class Reconciler:
    """Runs every check; with ``bus`` set, ``repair`` may re-publish through it."""

    def __init__(self, engine: Engine, *, outbox_bound_s: float, bus: Bus | None = None,
                 clock: Clock | None = None, delivery_bound_s: float | None = None,
                 topics: Subscribers | None = None) -> None:
        self.engine = engine
        self.outbox_bound_s = outbox_bound_s
        self.bus = bus
        self.clock = clock or (lambda: datetime.now(UTC))
        self.delivery_bound_s = outbox_bound_s if delivery_bound_s is None else delivery_bound_s
        self.topics = topics

    def run(self, *, repair: bool = False) -> Report:
        now = self.clock()
        report = Report()
        report.findings += self.stuck_calls(now, repair)
        report.findings += self.unknown_outcomes()
        report.findings += self.unrecorded_results(now)
        stale = self.stale_outbox(now, repair)
        report.findings += stale
        report.findings += self.undelivered(now, repair,
                                            named={f.about["message"] for f in stale})
        report.findings += self.dead_letters()
        report.findings += self.status_mismatches()
        report.findings += self.expired_locks(now, repair)
        return report

    # -- the ledger -------------------------------------------------------------------------

    def stuck_calls(self, now: datetime, repair: bool) -> list[Finding]:
        found = []
        for entry in Ledger(self.engine, clock=lambda: now).stuck(now, limit=1000):
            lease = entry.lease_until.isoformat() if entry.lease_until else "-"
            detail = (f"{entry.tool} by {entry.actor} ({entry.session_id}) in progress since "
                      f"{entry.started_at}, lease ended {lease}, attempt {entry.attempts}")
            safe = entry.tool in SAFE_TO_RUN_AGAIN
            repaired = None
            if repair and safe and self._release(entry.key, entry.owner, now):
                repaired = "claim released; the next delivery runs it again"
            advice = ("safe to run again: --repair releases it" if safe else
                      "may have run without its result stored: check the target system, "
                      "then record the outcome or release the claim by hand")
            found.append(Finding("stuck_call", f"call {entry.key[:16]}", detail, advice,
                                 repaired))
        return found

    def unknown_outcomes(self) -> list[Finding]:
        """Calls that finished after losing their lease: what they returned is kept but not
        trusted, so a person checks the target. No repair: only the target knows."""
        return [_unknown_outcome(entry) for entry in Ledger(self.engine).unknown(limit=1000)]

    def _release(self, key: str, owner: str | None, now: datetime) -> bool:
        """Compare-and-set: only a claim still in progress, still expired, same owner."""
        with transaction(self.engine, "the tool call ledger") as conn:
            done = conn.execute(
                update(tool_call_ledger)
                .where(tool_call_ledger.c.key == key,
                       tool_call_ledger.c.state == str(LedgerState.IN_PROGRESS),
                       tool_call_ledger.c.owner == owner,
                       tool_call_ledger.c.lease_until < now)
                .values(state=str(LedgerState.RELEASED), lease_until=None, finished_at=now))
            return done.rowcount == 1

    def unrecorded_results(self, now: datetime) -> list[Finding]:
        """Cases whose ledger holds more finished step calls (plan or rollback, each attempt
        one call) than their timeline has step results: a step ran and nobody was told."""
        cutoff = now - timedelta(seconds=self.outbox_bound_s)
        with self.engine.connect() as conn:
            calls = conn.execute(
                select(tool_call_ledger.c.session_id, func.count())
                .where(tool_call_ledger.c.tool.like("step.%"),
                       tool_call_ledger.c.state.in_([str(LedgerState.DONE),
                                                     str(LedgerState.REFUSED)]),
                       tool_call_ledger.c.finished_at < cutoff)
                .group_by(tool_call_ledger.c.session_id)).all()
            noted: dict[str, int] = {str(case_id): int(count) for case_id, count in conn.execute(
                select(case_timeline.c.case_id, func.count())
                .where(case_timeline.c.event.in_(STEP_NOTES))
                .group_by(case_timeline.c.case_id)).all()}
        found = []
        for session_id, count in calls:
            case_id = case_of_session(str(session_id))
            recorded = noted.get(case_id, 0)
            if int(count) > recorded:
                found.append(Finding(
                    "unrecorded_result", f"case {case_id}",
                    f"the ledger holds {count} finished step call(s), the timeline "
                    f"{recorded} step result(s)",
                    "a step ran but its result never reached the timeline: requeue the "
                    "executor's dead letter, or note the outcome by hand"))
        return found

    # -- the outbox -------------------------------------------------------------------------

    def stale_outbox(self, now: datetime, repair: bool) -> list[Finding]:
        rows = outbox.stale(self.engine, now - timedelta(seconds=self.outbox_bound_s))
        if not rows:
            return []
        published = self._republish() if repair and self.bus is not None else 0
        still = (outbox.still_unpublished(self.engine, [row["id"] for row in rows])
                 if published else None)
        advice = ("is a relay running? (`opsgate relay`, or the loop inside `opsgate serve`); "
                  "--repair re-publishes when OPSGATE_REDIS_URL is set")
        found = []
        for row in rows:
            age = (now - as_utc(row["since"])).total_seconds()
            repaired = ("re-published to the bus" if still is not None and row["id"] not in still
                        else None)
            found.append(Finding("stale_outbox", f"message #{row['id']}",
                                 f"{row['topic']} for case {row['key']} unpublished for "
                                 f"{age:.0f} s (bound {self.outbox_bound_s:g} s)", advice,
                                 repaired, about={"message": str(row["id"])}))
        return found

    def undelivered(self, now: datetime, repair: bool,
                    named: set[str] | frozenset[str] = frozenset()) -> list[Finding]:
        """Published messages a consumer of their topic has not recorded past the delivery
        bound since they were due: the bus lost them (Redis without its data, NATS without its
        store) or a consumer is not running. Named until recorded, sent again or not."""
        if self.topics is None:
            from core.consumers import subscriptions

            self.topics = subscribers(subscriptions())
        late = [m for m in look(self.engine, self.topics, now, self.delivery_bound_s).late
                if str(m.message_id) not in named]  # ``named``: already a stale_outbox finding
        if not late:
            return []
        again = {m.message_id for m in send_again(self.engine, late)} if repair else set()
        if again and self.bus is not None:
            self._republish()
        done = "re-published to the bus" if self.bus is not None else "handed back to the relay"
        advice = ("the relay sends it again by itself (OPSGATE_DELIVERY_BOUND_S); if it stays, "
                  "is every consumer running (`opsgate consume`)? --repair sends it again now")
        return [Finding("undelivered", f"message #{m.message_id}",
                        f"{m.topic} for case {m.key} due {m.waited_s(now):.0f} s ago"
                        f"{_sent_again(m)}, not recorded by {', '.join(m.missing)} (bound "
                        f"{self.delivery_bound_s:g} s)",
                        advice, done if m.message_id in again else None)
                for m in late]

    def _republish(self) -> int:
        assert self.bus is not None
        return OutboxRelay(self.engine, self.bus).drain()

    def dead_letters(self) -> list[Finding]:
        """Messages a consumer gave up on, and those it holds until it can take effect (posts
        while Slack is not configured: nothing to repair, they go out once it is)."""
        found = []
        for row in inbox.dead_letters(self.engine):
            error = " ".join(str(row["error"]).split())
            if error.startswith(HELD):
                found.append(Finding(
                    "held_post", f"held message {row['id']}",
                    f"{row['consumer']} holds message #{row['message_id']} ({row['topic']}, "
                    f"case {row['key']}): {error[len(HELD):][:160]}",
                    "set SLACK_BOT_TOKEN for the processes that run the notifier: the first "
                    "started with it delivers every held message once"))
                continue
            found.append(Finding(
                "dead_letter", f"dead letter {row['id']}",
                f"{row['consumer']} gave up on message #{row['message_id']} ({row['topic']}, "
                f"case {row['key']}) after {row['attempts']} attempts: {error[:160]}",
                f"fix the cause, then `opsgate outbox dead --requeue {row['id']}`"))
        return found

    # -- the cases --------------------------------------------------------------------------

    def status_mismatches(self) -> list[Finding]:
        found = []
        with self.engine.connect() as conn:
            cases = list(conn.execute(select(ops_case.c.id, ops_case.c.status,
                                             ops_case.c.version)).mappings())
            moves = _accepted_moves(conn)
        for case in cases:
            events = moves.get(str(case["id"]), [])
            try:
                folded: str = str(fold(events))
            except ValueError as illegal:
                folded = f"no status (the timeline does not fold: {illegal})"
            if folded != case["status"] or len(events) != case["version"]:
                found.append(Finding(
                    "status_mismatch", f"case {case['id']}",
                    f"status {case['status']} v{case['version']}, but its timeline folds to "
                    f"{folded} after {len(events)} accepted moves",
                    "the timeline is the record: investigate before any further move"))
        return found

    def expired_locks(self, now: datetime, repair: bool) -> list[Finding]:
        with self.engine.connect() as conn:
            rows = list(conn.execute(select(session_lock)
                                     .where(session_lock.c.lease_until < now)).mappings())
        found = []
        for row in rows:
            repaired = None
            if repair:
                with transaction(self.engine) as conn:
                    gone = conn.execute(delete(session_lock).where(
                        session_lock.c.session_id == row["session_id"],
                        session_lock.c.owner == row["owner"],
                        session_lock.c.lease_until < now)).rowcount
                repaired = "expired lock dropped" if gone == 1 else None
            found.append(Finding("expired_lock", f"session {row['session_id']}",
                                 f"lock of {row['owner']} expired at {row['lease_until']}",
                                 "harmless (the next run takes it over); --repair drops it",
                                 repaired))
        return found


def _sent_again(message: Late) -> str:
    """How often the message went out, when more than once (a re-send does not deliver it)."""
    times = message.sent_again
    return f", sent again {times} time{'s' if times > 1 else ''}" if times else ""


def _unknown_outcome(entry: LedgerEntry) -> Finding:
    kept = entry.result if isinstance(entry.result, dict) else {}
    case_id = case_of_session(entry.session_id)
    step = step_named_by(kept.get("business_key"), entry.tool.removeprefix("step.")) or (
        f"call {entry.key[:16]}")
    target = step_target(entry.tool, entry.args)
    returned = kept.get("returned")
    said = returned.get("summary") if isinstance(returned, dict) else None
    reported = f"; it reported: {said}" if said else ""
    detail = (f"{entry.tool} by {entry.actor} finished at {entry.finished_at}, but "
              f"{kept.get('why', 'after its lease was lost')}{reported}")
    return Finding("unknown_outcome", f"case {case_id} {step}", detail,
                   f"needs a person: check {target} to see whether it took effect, then "
                   "record what happened on the case",
                   about={"case": case_id, "step": step, "tool": entry.tool, "target": target,
                          "key": entry.key})


def _accepted_moves(conn: Connection) -> dict[str, list[CaseEvent]]:
    query = (select(case_timeline.c.case_id, case_timeline.c.event, case_timeline.c.actor,
                    case_timeline.c.meta)
             .order_by(case_timeline.c.case_id, case_timeline.c.id))
    moves: dict[str, list[CaseEvent]] = {}
    for row in conn.execute(query).mappings():
        if entry_of(row).accepted:
            moves.setdefault(str(row["case_id"]), []).append(CaseEvent(row["event"]))
    return moves
