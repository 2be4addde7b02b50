"""The case service: the only way to change a case, one database transaction per request.

A transition locks the case row, answers a repeated Idempotency-Key with the first reply, checks
the fence and the expected version, asks the pure FSM, runs the guards, and writes case
(version + 1), timeline, outbox and the reply together. Every business outcome, refusals
included, is a ``Reply``: its ``ReplyOutcome`` and the exact JSON bytes a repeat gets again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID, uuid4

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from core.clock import Clock, utcnow
from core.db import case_store as store
from core.db.database import connection, transaction
from core.domain.commands import (
    ApprovePlan,
    Fence,
    NoteCase,
    OpenCase,
    RejectPlan,
    TransitionCase,
)
from core.domain.fsm import (
    INITIAL_STATUS,
    Accepted,
    CaseEvent,
    CaseStatus,
    decide,
)
from core.domain.messages import (
    ApprovalRecordedFacts,
    MoveContext,
    NotePayload,
    Topic,
    messages_for,
    note_message,
    opened_message,
    scheduled_message,
)
from core.domain.plans import canonical_json, plan_hash, plan_problems
from core.domain.policy import ApprovalPolicy, Satisfied
from core.domain.promql import QueryBounds
from core.domain.refusal import Refused
from core.domain.verify import NO_METRICS_SOURCE, parse_verify, query_problems
from core.domain.views import ApprovalState, CaseView, ProposedPlan, TimelineEntry
from core.errors import (
    ApprovalRefused,
    GuardFailed,
    IllegalTransition,
    InvalidRequest,
    KeyReuse,
    NotFound,
    OpsgateError,
    PreconditionFailed,
    StaleFence,
    VersionConflict,
    error_from_body,
)
from core.gate import Gate, Ruling, waited_plan
from core.messaging import inbox
from core.metrics import count_write
from core.tracing import current as current_correlation_id

log = logging.getLogger(__name__)

MIN_CASE_PREFIX = 4  # hex digits of a case id that name it, when no other case shares them
HEX_DIGITS = frozenset("0123456789abcdef")

Row = Mapping[Any, Any]
Channels = Collection[str] | None
"""Which cases a reader may see: None, every one; else those whose chat thread is in one of
these channels (a reader's scope: a Slack channel, or an API principal's ``--channel``)."""
# What a write does inside the transaction: read what it needs, gather its rows, return its data.
Work = Callable[[Connection, Row | None, store.Writes], Mapping[str, Any]]


def correlation_of(given: str | None) -> str:
    """The correlation id a write records: the caller's, else the one bound to the work in
    hand (the REST request, the message a consumer handles), else a new one."""
    return given or current_correlation_id() or uuid4().hex


class ReplyOutcome(StrEnum):
    """What a request to the case service came to."""

    DONE = "done"  # the write was made (or the stage ran)
    CREATED = "created"  # a case was opened
    WAITING = "waiting"  # the stage ran and waits on more (a verification before its window)
    MOVED_ON = "moved_on"  # the case moved on first: the move is illegal from where it is
    #                        now, or the version or fence the request names is stale
    REFUSED = "refused"  # refused on its merits: a guard, the policy, a reused key, bad input


_DONE = frozenset({ReplyOutcome.DONE, ReplyOutcome.CREATED, ReplyOutcome.WAITING})


@dataclass(frozen=True)
class Reply:
    """A business outcome and its canonical JSON body: ``{"data": ...}`` when it is done,
    the refusal's ``{"error": ...}`` otherwise."""

    outcome: ReplyOutcome
    body: str
    replayed: bool = False

    @classmethod
    def of_data(cls, data: Any, outcome: ReplyOutcome = ReplyOutcome.DONE) -> Reply:
        return cls(outcome, canonical_json({"data": data}))

    @classmethod
    def of_error(cls, error: OpsgateError) -> Reply:
        moved_on = isinstance(error, IllegalTransition | PreconditionFailed)
        return cls(ReplyOutcome.MOVED_ON if moved_on else ReplyOutcome.REFUSED,
                   canonical_json(error.to_body()))

    @property
    def ok(self) -> bool:
        return self.outcome in _DONE

    @property
    def moved_on(self) -> bool:
        """Another writer moved the case first: a consumer's work on it is already done."""
        return self.outcome is ReplyOutcome.MOVED_ON

    @property
    def error(self) -> OpsgateError | None:
        """The refusal as its typed error (a new one each time); None when it is done."""
        return None if self.ok else error_from_body(json.loads(self.body))

    def data(self) -> Any:
        """The reply's data; the matching ``OpsgateError`` when it is a refusal."""
        error = self.error
        if error is not None:
            raise error
        return json.loads(self.body)["data"]


def fingerprint(intent: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(intent).encode("utf-8")).hexdigest()


def _log_written(timeline: Mapping[str, Any], outcome: ReplyOutcome) -> None:
    meta = timeline.get("meta") or {}
    log.info("case %s %s (%s): %s -> %s", timeline["case_id"], timeline["event"],
             meta.get("outcome"), meta.get("from"), meta.get("to"),
             extra={"case_id": str(timeline["case_id"]), "event": timeline["event"],
                    "outcome": meta.get("outcome"), "reply": str(outcome),
                    "version": meta.get("version")})


def case_view(row: Mapping[Any, Any]) -> CaseView:
    """A case as every reply shows it."""
    return {
        "case_id": str(row["id"]),
        "tenant": row["tenant"],
        "title": row["title"],
        "severity": row["severity"],
        "status": row["status"],
        "version": row["version"],
        "created_at": store.as_utc(row["created_at"]).isoformat(),
        "updated_at": store.as_utc(row["updated_at"]).isoformat(),
    }


def timeline_view(row: Mapping[Any, Any]) -> TimelineEntry:
    return {
        "id": row["id"],
        "event": row["event"],
        "actor": row["actor"],
        "reason": row["reason"],
        "correlation_id": row["correlation_id"],
        "meta": row["meta"],
        "created_at": store.as_utc(row["created_at"]).isoformat(),
    }


def only_one(ref: str, found: list[UUID]) -> UUID:
    """The one case of ``found`` that ``ref`` names; ``InvalidRequest`` when several share it."""
    if len(found) > 1:
        names = ", ".join(str(case_id)[:13] for case_id in found[:5])
        raise InvalidRequest(f"`{ref.strip().lower()}` matches several cases ({names}…): give "
                             "more of the id")
    return found[0]


class _Refusal(Exception):
    """A business refusal decided inside the transaction, to be stored and replied."""

    def __init__(self, error: OpsgateError, timeline_row: dict[str, Any] | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.timeline_row = timeline_row


class CaseService:
    """Opens, moves and reads cases. Built once by the composition root."""

    def __init__(self, engine: Engine, *, tenant: str = "default", clock: Clock = utcnow,
                 policy: ApprovalPolicy | None = None, reads_metrics: bool = False,
                 promql: QueryBounds | None = None) -> None:
        self.engine = engine
        self.tenant = tenant
        self.clock = clock
        # The default names no approver, so nobody approves: bootstrap passes the configured one.
        self.policy = policy or ApprovalPolicy()
        # Whether a metrics source is configured (core.evidence.has_metrics_source): without
        # one, plan_ready refuses a plan with a metric check, which nothing could ever judge.
        self.reads_metrics = reads_metrics
        # The bounds of the PromQL the verifier sends (core.evidence.promql_bounds), when metric
        # checks are read from Prometheus: plan_ready refuses a verify query that breaks them.
        self.promql = promql

    @property
    def gate(self) -> Gate:
        """The gate, judged by this service's policy and stamped by its clock (both read at each
        decision: tests move the clock)."""
        return Gate(self.policy, self.clock)

    # -- writes ---------------------------------------------------------------------------

    def open_case(self, cmd: OpenCase, key: str) -> Reply:
        """Open a case in NEW (version 0), once per idempotency key."""
        return self._idempotent(key, fingerprint(cmd.intent()), None,
                                lambda _conn, _case, writes: self._open(cmd, writes),
                                created=True)

    def transition(self, cmd: TransitionCase, key: str, *,
                   inbox_entry: tuple[str, int] | None = None) -> Reply:
        """Move a case by one FSM event, once per idempotency key. A consumer passes its
        ``inbox_entry`` (consumer, message id) so the inbox row commits with the effect."""
        return self._idempotent(
            key,
            fingerprint(cmd.intent()),
            cmd.case_id,
            lambda conn, case, writes: self._move(conn, case, cmd, writes),
            fence=cmd.fence,
            inbox_entry=inbox_entry,
        )

    def note(self, cmd: NoteCase, key: str, *,
             inbox_entry: tuple[str, int] | None = None,
             also: Callable[[Connection], None] | None = None) -> Reply:
        """Record a fact on the case's timeline (and ``cmd.topic`` in the outbox) without moving
        it, once per idempotency key. ``also`` writes the fact's own rows (the analyst's
        evidence) in the same transaction, only when the note is recorded, never on a replay."""
        def work(_conn: Connection, case: Row | None, writes: store.Writes) -> dict[str, Any]:
            data = self._note(case, cmd, writes)
            if also is not None:
                also(_conn)
            return data

        return self._idempotent(
            key,
            fingerprint(cmd.intent()),
            cmd.case_id,
            work,
            inbox_entry=inbox_entry,
        )

    def approve_plan(self, cmd: ApprovePlan, key: str, *,
                     inbox_entry: tuple[str, int] | None = None) -> Reply:
        """One approver's yes to the plan the case waits on, once per idempotency key. The yes
        is recorded; when the policy is then satisfied the case moves to EXECUTING in the same
        transaction. An approver who already said yes (a double click under another key)
        records nothing new."""
        return self._idempotent(key, fingerprint(cmd.intent()), cmd.case_id,
                                lambda conn, case, writes: self._approve(conn, case, cmd, writes),
                                inbox_entry=inbox_entry)

    def reject_plan(self, cmd: RejectPlan, key: str, *,
                    inbox_entry: tuple[str, int] | None = None) -> Reply:
        """One approver's no to the plan the case waits on: the case parks (``gate_rejected``)
        with the reason, once per idempotency key. The approver rules apply as to a yes."""
        if not cmd.reason.strip():
            return Reply.of_error(InvalidRequest("a rejection needs a reason",
                                                 problems=["reason: empty"]))
        return self._idempotent(key, fingerprint(cmd.intent()), cmd.case_id,
                                lambda conn, case, writes: self._reject(conn, case, cmd, writes),
                                inbox_entry=inbox_entry)

    def issue_fence(self, session_id: str) -> Fence:
        """A new fence token for ``session_id``, higher than every one issued before."""
        with self._transaction() as conn:
            return Fence(session_id, store.issue_fence(conn, session_id))

    # -- reads ----------------------------------------------------------------------------

    def get_case(self, case_id: UUID, *, channels: Channels = None) -> CaseView:
        """The case ``case_id``; a case outside ``channels`` is ``NotFound`` as an unknown one."""
        with self._connection() as conn:
            row = store.read_case(conn, case_id, channels)
        if row is None:
            raise NotFound(f"no case {case_id}", case_id=str(case_id))
        return case_view(row)

    def find_case_id(self, ref: str) -> UUID:
        """The case ``ref`` names: its id, or a prefix of at least ``MIN_CASE_PREFIX`` of its
        hex digits (dashes optional, any case) that no other case shares. ``InvalidRequest``
        for anything else or a prefix several cases share, ``NotFound`` when none has it."""
        found = self.case_ids_matching(ref, limit=6)
        if not found:
            raise NotFound(f"no case id starts with `{ref.strip().lower()}`", case=ref)
        return only_one(ref, found)

    def case_ids_matching(self, ref: str, *, limit: int) -> list[UUID]:
        """Up to ``limit`` ids of the cases ``ref`` may name (``find_case_id``'s rule), for a
        caller that chooses among them; ``InvalidRequest`` when ``ref`` is no case id."""
        digits = ref.strip().lower().replace("-", "")
        if not MIN_CASE_PREFIX <= len(digits) <= 32 or set(digits) - HEX_DIGITS:
            raise InvalidRequest(f"`{ref}` is not a case id: give at least {MIN_CASE_PREFIX} "
                                 "hex digits of its id")
        with self._connection() as conn:
            return store.case_ids_starting_with(conn, digits, limit=limit)

    def case_ids_in(self, case_ids: Collection[UUID], channels: Channels) -> set[UUID]:
        """Those of ``case_ids`` a reader limited to ``channels`` may see (all when None)."""
        if channels is None:
            return set(case_ids)
        with self._connection() as conn:
            return store.case_ids_in_channels(conn, case_ids, channels)

    def timeline(self, case_id: UUID, *, channels: Channels = None) -> list[TimelineEntry]:
        with self._connection() as conn:
            if store.read_case(conn, case_id, channels) is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            return [timeline_view(row) for row in store.read_timeline(conn, case_id)]

    def planning_round(self, case_id: UUID) -> int:
        """The version at which the case last entered PLANNING: stable while the plan waits at
        the gate, new after a park and resume, so a re-plan is a new intent."""
        round_ = 0
        for row in self.timeline(case_id):
            meta = row["meta"] or {}
            if meta.get("outcome") == "accepted" and meta.get("to") == CaseStatus.PLANNING:
                round_ = int(meta.get("version", 0))
        return round_

    def may_reject(self, case_id: UUID, plan_hash: str, person: str, *,
                   expected_version: int | None = None) -> bool:
        """Whether ``person``'s no to the plan ``plan_hash`` would be taken now, by the gate's
        own rules (a front end asks before it asks for a reason)."""
        with self._connection() as conn:
            case = store.read_case(conn, case_id)
            if case is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            return self.gate.may_reject(conn, case, plan_hash, person,
                                        expected_version=expected_version)

    def list_cases(self, status: CaseStatus | None = None, limit: int = 50, *,
                   channels: Channels = None, threadless: bool = False) -> list[CaseView]:
        """The newest cases first (those in ``status``; those in ``channels``, and with
        ``threadless`` those without a chat thread too)."""
        with self._connection() as conn:
            rows = store.list_cases(conn, None if status is None else str(status), limit,
                                    channels, threadless=threadless)
        return [case_view(row) for row in rows]

    def proposed_plan(self, case_id: UUID, digest: str | None = None) -> ProposedPlan | None:
        """The case's plan with hash ``digest`` (its latest plan when None): ``plan_hash``,
        ``plan``, ``case_version``, ``proposed_by``; None when there is none."""
        with self._connection() as conn:
            row = (store.latest_plan(conn, case_id) if digest is None
                   else store.plan_by_hash(conn, case_id, digest))
        if row is None:
            return None
        return {"plan_hash": row["plan_hash"], "plan": dict(row["plan"]),
                "case_version": row["case_version"], "proposed_by": row["proposed_by"]}

    # -- the transaction ------------------------------------------------------------------

    def _idempotent(
        self,
        key: str,
        digest: str,
        case_id: UUID | None,
        work: Work,
        fence: Fence | None = None,
        created: bool = False,
        inbox_entry: tuple[str, int] | None = None,
    ) -> Reply:
        # A concurrent first arrival of the same key loses the primary-key race: run again and
        # the second pass replays the winner's reply.
        for attempt in (1, 2):
            try:
                with self._transaction() as conn:
                    reply, writes = self._once(conn, key, digest, case_id, work, fence,
                                               created)
                    if inbox_entry is not None:
                        inbox.mark(conn, *inbox_entry)
                timeline = None if writes is None else writes.timeline
                count_write(reply.error, reply.replayed, timeline)
                if timeline is not None and log.isEnabledFor(logging.INFO):
                    _log_written(timeline, reply.outcome)
                return reply
            except IntegrityError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _once(
        self,
        conn: Connection,
        key: str,
        digest: str,
        case_id: UUID | None,
        work: Work,
        fence: Fence | None,
        created: bool,
    ) -> tuple[Reply, store.Writes | None]:
        """The reply, and the writes it committed (None: a replay or refusal wrote nothing)."""
        case, early = self._lock_and_recall(conn, key, digest, case_id, fence)
        if early is not None:
            return early, None
        return self._perform(conn, key, digest, case, work, created)

    def _lock_and_recall(
        self, conn: Connection, key: str, digest: str, case_id: UUID | None, fence: Fence | None
    ) -> tuple[Row | None, Reply | None]:
        """Lock the case and recall the key: the locked case, or the reply that ends the request
        before any work (no such case, a replay, a stale fence)."""
        case: Row | None = None
        prior: Row | None = None
        if case_id is None:
            prior = store.recall_reply(conn, key)
        else:
            case, prior = store.lock_case_and_recall(conn, case_id, key)
            if case is None:
                return None, Reply.of_error(NotFound(f"no case {case_id}", case_id=str(case_id)))
        if prior is not None:
            return case, self._replay(prior, digest, key)
        if fence is not None and (stale := self._stale(conn, fence)) is not None:
            return case, Reply.of_error(stale)
        return case, None

    @staticmethod
    def _perform(conn: Connection, key: str, digest: str, case: Row | None, work: Work,
                 created: bool) -> tuple[Reply, store.Writes]:
        """Run the work on the locked case; write what it did (or its refusal's timeline row)
        together with the key's reply."""
        writes = store.Writes()
        try:
            reply = Reply.of_data(work(conn, case, writes),
                                  ReplyOutcome.CREATED if created else ReplyOutcome.DONE)
        except _Refusal as refusal:
            writes = store.Writes(timeline=refusal.timeline_row)
            reply = Reply.of_error(refusal.error)
        writes.reply = {"key": key, "fingerprint": digest, "outcome": str(reply.outcome),
                        "body": reply.body}
        store.write(conn, writes)
        return reply, writes

    @staticmethod
    def _replay(prior: Row, digest: str, key: str) -> Reply:
        if prior["fingerprint"] != digest:
            reuse = KeyReuse(
                "this Idempotency-Key was used before for a different request", key=key
            )
            return Reply.of_error(reuse)
        return Reply(ReplyOutcome(prior["outcome"]), str(prior["body"]), replayed=True)

    @staticmethod
    def _stale(conn: Connection, fence: Fence) -> StaleFence | None:
        latest = store.fence_token(conn, fence.session_id)
        if latest is not None and fence.token >= latest:
            return None
        return StaleFence(
            f"fence token {fence.token} of session {fence.session_id} is stale",
            session_id=fence.session_id, token=fence.token, latest=latest,
        )

    def _open(self, cmd: OpenCase, writes: store.Writes) -> CaseView:
        case_id, now = uuid4(), self.clock()
        correlation_id = correlation_of(cmd.correlation_id)
        row = {"id": case_id, "tenant": cmd.tenant or self.tenant, "title": cmd.title,
               "severity": cmd.severity, "status": str(INITIAL_STATUS), "version": 0,
               "created_at": now, "updated_at": now}
        writes.new_case = row
        if cmd.thread is not None:
            # Bound with the case, so nothing the case causes (its outbox) finds it threadless.
            writes.thread = {"team": cmd.thread.team, "channel": cmd.thread.channel,
                             "thread_ts": cmd.thread.thread_ts, "case_id": case_id,
                             "created_at": now}
        writes.timeline = {
            "case_id": case_id, "event": "case_opened", "actor": cmd.actor, "reason": None,
            "correlation_id": correlation_id, "created_at": now,
            "meta": {"outcome": "opened", "from": None, "to": str(INITIAL_STATUS), "version": 0,
                     **cmd.attribution},
        }
        writes.outbox = [opened_message(case_id, cmd.title, cmd.severity, cmd.actor,
                                        correlation_id)]
        return case_view(row)

    def _note(self, case: Row | None, cmd: NoteCase, writes: store.Writes) -> dict[str, Any]:
        assert case is not None, "a note always concerns a locked case"
        if cmd.event in CaseEvent.__members__.values():
            raise _Refusal(GuardFailed(f"{cmd.event} is an FSM event: move the case instead",
                                       problems=[f"event: {cmd.event}"]))
        correlation_id = correlation_of(cmd.correlation_id)
        meta = {"outcome": "note", "from": case["status"], "to": case["status"],
                "version": case["version"], **({"context": cmd.meta} if cmd.meta else {})}
        writes.timeline = {"case_id": cmd.case_id, "event": cmd.event, "actor": cmd.actor,
                           "reason": cmd.reason, "correlation_id": correlation_id,
                           "meta": meta, "created_at": self.clock()}
        note: NotePayload = {"case_id": str(cmd.case_id), "version": case["version"],
                             "event": cmd.event, "actor": cmd.actor, "reason": cmd.reason,
                             "correlation_id": correlation_id}
        if cmd.topic is not None:
            writes.outbox.append(note_message(cmd.topic, note, cmd.meta))
        if cmd.schedule is not None:
            writes.outbox.append(scheduled_message(cmd.schedule.topic, note, cmd.event,
                                                   cmd.schedule.payload,
                                                   cmd.schedule.deliver_after))
        return {**case_view(case), "note": cmd.event}

    def _move(self, conn: Connection, case: Row | None, cmd: TransitionCase,
              writes: store.Writes, ruling: Ruling | None = None) -> Mapping[str, Any]:
        assert case is not None, "a transition always runs on a locked case"
        status, version = CaseStatus(case["status"]), int(case["version"])
        move = self._allowed_move(status, version, cmd)
        now, correlation_id = self.clock(), correlation_of(cmd.correlation_id)
        try:
            digest = self._guard(conn, case, cmd, version + 1, writes, ruling)
        except GuardFailed as refused:
            raise _Refusal(refused, self._timeline_row(
                cmd, now, correlation_id, outcome="refused", source=status, target=None,
                version=version, extra={"problems": refused.details.get("problems", [])},
                reason=refused.message)) from None
        return self._record_move(case, cmd, move, digest, now, correlation_id, writes)

    @staticmethod
    def _allowed_move(status: CaseStatus, version: int, cmd: TransitionCase) -> Accepted:
        """The FSM's move for the event; refused when the case is not at the expected version
        or the event has no move from its status."""
        if cmd.expected_version is not None and cmd.expected_version != version:
            raise _Refusal(VersionConflict(
                f"case is at version {version}, not {cmd.expected_version}",
                expected_version=cmd.expected_version, version=version))
        decision = decide(status, cmd.event)
        if isinstance(decision, Refused):
            raise _Refusal(IllegalTransition(decision.reason, status=str(status),
                                             event=str(cmd.event)))
        return decision

    def _record_move(self, case: Row, cmd: TransitionCase, move: Accepted, digest: str | None,
                     now: datetime, correlation_id: str,
                     writes: store.Writes) -> Mapping[str, Any]:
        """Record the accepted move (the case row, its timeline entry, its outbox) and return
        the moved case's view."""
        version = int(case["version"]) + 1
        writes.moved_case = {"id": cmd.case_id, "status": str(move.target),
                             "version": version, "updated_at": now}
        extra = {} if digest is None else {"plan_hash": digest}
        writes.timeline = self._timeline_row(
            cmd, now, correlation_id, outcome="accepted", source=move.source,
            target=move.target, version=version, extra=extra, reason=cmd.reason)
        ctx = MoveContext(cmd.case_id, version, cmd.actor, correlation_id, digest, cmd.reason)
        writes.outbox = messages_for(move, ctx)
        view = case_view({**case, "status": str(move.target), "version": version,
                          "updated_at": now})
        return view if digest is None else {**view, "plan_hash": digest}

    def _guard(self, conn: Connection, case: Row, cmd: TransitionCase, next_version: int,
               writes: store.Writes, ruling: Ruling | None) -> str | None:
        """Run the event's guard; record what it admits. Returns the plan hash it concerns."""
        if cmd.event is CaseEvent.PLAN_READY:
            return self._admit_plan(conn, case, cmd, next_version, writes)
        if cmd.event is CaseEvent.GATE_APPROVED:
            return self._admit_approval(conn, cmd, writes, ruling)
        if cmd.event is CaseEvent.GATE_REJECTED:
            return self._admit_rejection(conn, cmd, writes)
        if cmd.event is CaseEvent.GATE_EXPIRED:
            return self._admit_expiry(conn, case, cmd, writes)
        return None

    def _admit_plan(self, conn: Connection, case: Row, cmd: TransitionCase, next_version: int,
                    writes: store.Writes) -> str:
        plan = cmd.plan
        if plan is None:
            latest = store.latest_plan(conn, cmd.case_id)
            if latest is None:
                raise GuardFailed("plan_ready needs a ChangePlan: none is attached",
                                  problems=["plan: missing"])
            plan = dict(latest["plan"])
        problems = plan_problems(plan)
        if problems:
            raise GuardFailed("the plan is incomplete or invalid", problems=problems)
        block = parse_verify(plan["verify"])
        if not self.reads_metrics and block.reads_metrics:
            raise GuardFailed(f"the plan's metric check cannot be judged: {NO_METRICS_SOURCE}",
                              problems=[f"plan.verify: {NO_METRICS_SOURCE}"])
        if self.promql is not None:
            refused = query_problems(block, self.promql, case["tenant"])
            if refused:
                raise GuardFailed("the plan's verify query would not be sent to Prometheus: "
                                  f"{refused[0]}", problems=[f"plan.{p}" for p in refused])
        digest = plan_hash(plan)
        writes.plan = {"id": uuid4(), "case_id": cmd.case_id, "case_version": next_version,
                       "plan_hash": digest, "plan": dict(plan),
                       "proposed_by": cmd.requester or cmd.actor}
        return digest

    def _admit_approval(self, conn: Connection, cmd: TransitionCase, writes: store.Writes,
                        ruling: Ruling | None) -> str:
        """gate_approved only when the gate is decided: by the ruling ``approve_plan`` already
        made on this click, else (a raw gate_approved) by the gate's ruling on the actor's yes."""
        if ruling is None:
            plan = waited_plan(conn, cmd.case_id, cmd.plan_hash)
            ruling = self.gate.approval(conn, plan, cmd.actor)
        digest = ruling.admitted()
        writes.approval = ruling.approval
        return digest

    def _admit_rejection(self, conn: Connection, cmd: TransitionCase,
                         writes: store.Writes) -> str:
        """gate_rejected only by someone the gate lets decide the plan; recorded as a no."""
        plan = waited_plan(conn, cmd.case_id, cmd.plan_hash, hash_required=False)
        writes.approval = self.gate.rejection(plan, cmd.actor, cmd.reason)
        return str(plan["plan_hash"])

    def _admit_expiry(self, conn: Connection, case: Row, cmd: TransitionCase,
                      writes: store.Writes) -> str:
        """gate_expired only for the plan the case waits on (by hash), once the gate says its
        approval expired; recorded as the plan's expiry."""
        plan = waited_plan(conn, cmd.case_id, cmd.plan_hash)
        writes.approval = self.gate.expiry(case, plan, cmd.actor, cmd.reason)
        return str(plan["plan_hash"])

    # -- the gate -------------------------------------------------------------------------

    def _approve(self, conn: Connection, case: Row | None, cmd: ApprovePlan,
                 writes: store.Writes) -> dict[str, Any]:
        assert case is not None, "an approval always concerns a locked case"
        plan = self._gate_plan(conn, case, cmd, "plan_approval")
        ruling = self.gate.approval(conn, plan, cmd.approver)
        verdict, digest = ruling.verdict, ruling.plan_hash
        if isinstance(verdict, Refused):
            raise _Refusal(ApprovalRefused(verdict.reason, approver=cmd.approver),
                           self._gate_row(case, "plan_approval", cmd.approver, verdict.reason,
                                          cmd.correlation_id, outcome="refused",
                                          extra={"plan_hash": digest,
                                                 "problems": [f"approver: {verdict.reason}"],
                                                 **cmd.attribution}))
        if isinstance(verdict, Satisfied):
            move = TransitionCase(cmd.case_id, CaseEvent.GATE_APPROVED, actor=cmd.approver,
                                  reason=verdict.reason, correlation_id=cmd.correlation_id,
                                  plan_hash=digest, meta={"approvers": list(verdict.approvers)},
                                  attribution=cmd.attribution)
            return {**self._move(conn, case, move, writes, ruling), "approval": ruling.state()}
        writes.approval = ruling.approval
        if ruling.approval is not None:
            self._record_pending(case, cmd, digest, ruling.state(), writes)
        return {**case_view(case), "plan_hash": digest, "approval": ruling.state()}

    def _record_pending(self, case: Row, cmd: ApprovePlan, digest: str, state: ApprovalState,
                        writes: store.Writes) -> None:
        """A yes that is not yet enough: one timeline row and one event for the chat thread."""
        facts: ApprovalRecordedFacts = {"plan_hash": digest, "approvers": state["approvers"],
                                        "needs": state["needs"]}
        writes.timeline = self._gate_row(case, "plan_approval", cmd.approver, state["reason"],
                                         cmd.correlation_id, outcome="note",
                                         extra={**facts, **cmd.attribution})
        note: NotePayload = {"case_id": str(case["id"]), "version": case["version"],
                             "event": "plan_approval", "actor": cmd.approver,
                             "reason": state["reason"],
                             "correlation_id": writes.timeline["correlation_id"]}
        writes.outbox = [note_message(Topic.APPROVAL_RECORDED, note, facts)]

    def _reject(self, conn: Connection, case: Row | None, cmd: RejectPlan,
                writes: store.Writes) -> Mapping[str, Any]:
        assert case is not None, "a rejection always concerns a locked case"
        plan = self._gate_plan(conn, case, cmd, "gate_rejected")
        move = TransitionCase(cmd.case_id, CaseEvent.GATE_REJECTED, actor=cmd.approver,
                              reason=cmd.reason, correlation_id=cmd.correlation_id,
                              plan_hash=str(plan["plan_hash"]), attribution=cmd.attribution)
        return self._move(conn, case, move, writes)

    def _gate_plan(self, conn: Connection, case: Row, cmd: ApprovePlan | RejectPlan,
                   event: str) -> Row:
        """The plan the case waits on, which ``cmd`` must name (the gate decides); refusals
        explain themselves, and one that concerns the plan leaves an audit row."""
        try:
            return self.gate.waiting(conn, case, cmd.plan_hash,
                                     expected_version=cmd.expected_version, event=event)
        except GuardFailed as refused:
            raise _Refusal(refused, self._gate_row(
                case, event, cmd.approver, refused.message, cmd.correlation_id,
                outcome="refused", extra={"problems": refused.details.get("problems", []),
                                          **cmd.attribution},
            )) from None
        except OpsgateError as refused:  # outside the gate, or an outdated view: nothing to audit
            raise _Refusal(refused) from None

    def _gate_row(self, case: Row, event: str, actor: str, reason: str,
                  correlation_id: str | None, *, outcome: str,
                  extra: dict[str, Any]) -> dict[str, Any]:
        """A timeline row about the gate that does not move the case."""
        meta = {"outcome": outcome, "from": case["status"],
                "to": case["status"] if outcome == "note" else None,
                "version": case["version"], **extra}
        return {"case_id": case["id"], "event": event, "actor": actor, "reason": reason,
                "correlation_id": correlation_of(correlation_id), "meta": meta,
                "created_at": self.clock()}

    @staticmethod
    def _timeline_row(cmd: TransitionCase, now: datetime, correlation_id: str, *, outcome: str,
                      source: CaseStatus, target: CaseStatus | None, version: int,
                      extra: dict[str, Any], reason: str | None) -> dict[str, Any]:
        meta = {"outcome": outcome, "from": str(source),
                "to": None if target is None else str(target), "version": version, **extra,
                **cmd.attribution}
        if cmd.meta:
            meta["context"] = cmd.meta
        return {"case_id": cmd.case_id, "event": str(cmd.event), "actor": cmd.actor,
                "reason": reason, "correlation_id": correlation_id, "meta": meta,
                "created_at": now}

    # -- connections ----------------------------------------------------------------------

    def _transaction(self) -> AbstractContextManager[Connection]:
        return transaction(self.engine)

    def _connection(self) -> AbstractContextManager[Connection]:
        return connection(self.engine)
