"""The case service: the only way to change a case, one database transaction per request.

A write locks the case row, answers a repeated Idempotency-Key with the first reply, checks the
fence and the expected version, asks the pure FSM and the gate, and writes case (version + 1),
timeline, outbox and the reply together (``uow``, ``handlers``, ``gate``); an open may bring the
case's first note into its transaction (``FirstNote``). Every business
outcome, refusals included, is a ``Reply[T]``. Reads are ``queries.CaseReads``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from uuid import UUID

from sqlalchemy import Connection, Engine

from core.cases import handlers
from core.cases.approvals import GateStatus, gate_status
from core.cases.gate import Gate
from core.cases.progress import CaseProgress, current_plan, latest_plan_hash, progress_rows
from core.cases.queries import CaseReads, Channels
from core.cases.replies import Reply
from core.cases.rows import case_view, timeline_view
from core.cases.timeline import entries_of
from core.cases.uow import FollowUp, Row, UnitOfWork, Work, fingerprint, refuse
from core.clock import Clock, utcnow
from core.db import case_store as store
from core.domain.commands import ApprovePlan, Fence, NoteCase, OpenCase, RejectPlan, TransitionCase
from core.domain.dry_run import DryRun, DryRunReport
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plans import parsed_or_none
from core.domain.policy import ApprovalPolicy
from core.domain.promql import QueryBounds
from core.domain.views import ApprovalView, CaseView, MovedCase, NotedCase
from core.errors import InvalidRequest, NotFound
from core.investigate.scope import Target

NAMING_STATUSES = (CaseStatus.NEW, CaseStatus.ANALYZING, CaseStatus.PLANNING)
"""While a case may still name its components: before any plan reaches the gate."""

@dataclass(frozen=True)
class FirstNote:
    """The note an open writes on the case it makes, in the open's transaction: ``of`` builds
    it for the new case, ``key`` is its own idempotency key (a ``note`` repeated under it
    replays it) and ``also`` writes its own rows, given the case, only when it is recorded."""

    key: str
    of: Callable[[UUID], NoteCase]
    also: Callable[[Connection, UUID], None] | None = None


class CaseService(CaseReads):
    """Opens, moves and reads cases. Built once by the composition root."""

    def __init__(self, engine: Engine, *, tenant: str = "default", clock: Clock = utcnow,
                 policy: ApprovalPolicy | None = None, reads_metrics: bool = False,
                 promql: QueryBounds | None = None, dry_run: DryRun | None = None,
                 default_scope: Target | None = None) -> None:
        self.uow = UnitOfWork(engine)
        self.tenant = tenant
        self.clock = clock
        # The default names no approver, so nobody approves: bootstrap passes the configured one.
        self.policy = policy or ApprovalPolicy()
        # Whether a metrics source is configured (core.evidence.configured.has_metrics_source):
        # without one, plan_ready refuses a plan with a metric check, which nothing could judge.
        self.reads_metrics = reads_metrics
        # The bounds of the PromQL the verifier sends (core.evidence.configured.promql_bounds),
        # when metric checks are read from Prometheus: plan_ready refuses a verify query that
        # breaks them.
        self.promql = promql
        # What reads a proposed plan's targets before it comes to the gate
        # (core.steps.dry_run.PlanDryRun); None: plans are proposed without a dry run.
        self.dry_run = dry_run
        # Whose series a metric check of a case naming no component may select (the operator's
        # OPSGATE_DEFAULT_* scope); None: such a case's metric checks are refused.
        self.default_scope = default_scope

    @property
    def gate(self) -> Gate:
        """The gate, judged by this service's policy and stamped by its clock (both read at each
        decision: tests move the clock)."""
        return Gate(self.policy, self.clock, self.reads_metrics, self.promql,
                    default_scope=self.default_scope)

    # -- writes ---------------------------------------------------------------------------

    def open_case(self, cmd: OpenCase, key: str, *,
                  note: FirstNote | None = None) -> Reply[CaseView]:
        """Open a case in NEW (version 0), once per idempotency key; with ``note``, its first
        note in the same transaction, so a repeat of the key replays the open and the note
        together and no open case is ever without it."""
        self._check_components(cmd.components)
        then = None if note is None else (
            lambda view: self._first_note(note, UUID(view["case_id"])))
        return self.uow.run(
            key, fingerprint(cmd.intent()), None,
            lambda _conn, _case, writes: handlers.open_case(cmd, writes, tenant=self.tenant,
                                                            now=self.clock()),
            created=True, then=then)

    def _check_components(self, names: tuple[str, ...]) -> None:
        """``InvalidRequest`` when a case would name a component the catalog does not have."""
        if not names:
            return
        catalog = self.policy.catalog()
        _known, unknown = catalog.resolve(names)
        if not unknown:
            return
        known = ", ".join(sorted(catalog.components)[:10]) or "none: OPSGATE_CATALOG is unset"
        raise InvalidRequest(f"unknown component {', '.join(unknown)}: not in the service "
                             f"catalog (known: {known})",
                             problems=[f"components: {name} is not in the catalog"
                                       for name in unknown])

    def _first_note(self, first: FirstNote, case_id: UUID) -> FollowUp:
        cmd, also = first.of(case_id), first.also
        return FollowUp(first.key, fingerprint(cmd.intent()), case_id,
                        self._noting(cmd, None if also is None
                                     else lambda conn: also(conn, case_id)))

    def transition(self, cmd: TransitionCase, key: str, *,
                   inbox_entry: tuple[str, int] | None = None) -> Reply[MovedCase]:
        """Move a case by one FSM event, once per idempotency key. A consumer passes its
        ``inbox_entry`` (consumer, message id) so the inbox row commits with the effect."""
        report = self._dry_run(cmd) if cmd.event is CaseEvent.PLAN_READY else None
        gate = replace(self.gate, dry_run=report)

        def work(conn: Connection, case: Row | None, writes: store.Writes) -> MovedCase:
            moved = handlers.move(conn, case, cmd, writes, gate, self.clock())
            if report is not None and writes.timeline is not None \
                    and moved.get("plan_hash") == report.digest:
                writes.timeline["meta"]["dry_run"] = report.facts()
            return moved

        return self.uow.run(key, fingerprint(cmd.intent()), cmd.case_id, work,
                            fence=cmd.fence, inbox_entry=inbox_entry)

    def _dry_run(self, cmd: TransitionCase) -> DryRunReport | None:
        """The dry run of the plan a ``plan_ready`` proposes (the one it carries, else the
        case's latest), read before the transaction: the targets' answers never hold the case's
        lock. None without a dry run, or for a plan the guard refuses anyway."""
        if self.dry_run is None:
            return None
        plan = cmd.plan
        if plan is None:
            latest = self.proposed_plan(cmd.case_id)
            plan = None if latest is None else latest["plan"]
        parsed = None if plan is None else parsed_or_none(plan)
        return None if parsed is None else self.dry_run(parsed)

    def note(self, cmd: NoteCase, key: str, *,
             inbox_entry: tuple[str, int] | None = None,
             also: Callable[[Connection], None] | None = None) -> Reply[NotedCase]:
        """Record a fact on the case's timeline (and ``cmd.topic`` in the outbox) without moving
        it, once per idempotency key. ``also`` writes the fact's own rows (the analyst's
        evidence) in the same transaction, only when the note is recorded, never on a replay."""
        return self.uow.run(key, fingerprint(cmd.intent()), cmd.case_id,
                            self._noting(cmd, also), inbox_entry=inbox_entry)

    def _noting(self, cmd: NoteCase,
                also: Callable[[Connection], None] | None) -> Work[NotedCase]:
        """The work of a note: its rows, then (when it is recorded) ``also``'s."""
        def work(conn: Connection, case: Row | None, writes: store.Writes) -> NotedCase:
            data = handlers.note(case, cmd, writes, now=self.clock())
            if also is not None:
                also(conn)
            return data

        return work

    def name_components(self, case_id: UUID, components: Sequence[str], actor: str, key: str,
                        *, correlation_id: str | None = None) -> Reply[NotedCase]:
        """Name the catalog components a case concerns, once, before a plan reaches the gate
        (the policy reads their owners: naming them later would change who may approve a plan
        already shown). A note on the timeline and the case row, in one transaction; a refusal
        (unknown component, named already, too late) is the key's reply."""
        names = tuple(dict.fromkeys(components))

        def name(conn: Connection) -> None:  # under the case's lock
            row = store.read_case(conn, case_id)
            assert row is not None, "the note found the case"
            try:
                self._check_components(names)
                _may_name(case_view(row))
            except InvalidRequest as refused:
                raise refuse(refused) from None
            store.name_components(conn, case_id, names)

        cmd = NoteCase(case_id, "components_named", actor,
                       reason=f"the case concerns {', '.join(names)}",
                       meta={"components": list(names)}, correlation_id=correlation_id)
        return self.note(cmd, key, also=name)

    def approve_plan(self, cmd: ApprovePlan, key: str, *,
                     inbox_entry: tuple[str, int] | None = None) -> Reply[ApprovalView]:
        """One approver's yes to the plan the case waits on, once per idempotency key. The yes
        is recorded; when the policy is then satisfied the case moves to EXECUTING in the same
        transaction. An approver who already said yes (a double click under another key)
        records nothing new."""
        return self.uow.run(key, fingerprint(cmd.intent()), cmd.case_id,
                            lambda conn, case, writes: self.gate.approve(conn, case, cmd, writes),
                            inbox_entry=inbox_entry)

    def reject_plan(self, cmd: RejectPlan, key: str, *,
                    inbox_entry: tuple[str, int] | None = None) -> Reply[MovedCase]:
        """One approver's no to the plan the case waits on: the case parks (``gate_rejected``)
        with the reason, once per idempotency key. The approver rules apply as to a yes."""
        if not cmd.reason.strip():
            return Reply.of_error(InvalidRequest("a rejection needs a reason",
                                                 problems=["reason: empty"]))
        return self.uow.run(key, fingerprint(cmd.intent()), cmd.case_id,
                            lambda conn, case, writes: self.gate.reject(conn, case, cmd, writes),
                            inbox_entry=inbox_entry)

    def issue_fence(self, session_id: str) -> Fence:
        """A new fence token for ``session_id``, higher than every one issued before."""
        with self.uow.transaction() as conn:
            return Fence(session_id, store.issue_fence(conn, session_id))

    # -- the gate's reads -----------------------------------------------------------------

    def may_reject(self, case_id: UUID, plan_hash: str, person: str, *,
                   expected_version: int | None = None) -> bool:
        """Whether ``person``'s no to the plan ``plan_hash`` would be taken now, by the gate's
        own rules (a front end asks before it asks for a reason)."""
        with self.uow.connection() as conn:
            case = store.read_case(conn, case_id)
            if case is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            return self.gate.may_reject(conn, case, plan_hash, person,
                                        expected_version=expected_version)

    def gate_status(self, case_id: UUID, plan_hash: str | None = None, *,
                    version: int | None = None) -> GateStatus | None:
        """Where the gate stands for the case's plan ``plan_hash`` (its latest plan when None;
        with ``version``, its proposal made at that case version), read from its approval rows;
        None when the case has no such plan."""
        with self.uow.connection() as conn:
            case = store.read_case(conn, case_id)
            if case is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            if plan_hash is None:
                plan = store.latest_plan(conn, case_id)
            elif version is None:
                plan = store.plan_by_hash(conn, case_id, plan_hash)
            else:
                plan = store.plan_of_version(conn, case_id, version, plan_hash)
            return None if plan is None else gate_status(conn, self.policy, case, plan)

    def progress(self, case_id: UUID, *, channels: Channels = None) -> CaseProgress:
        """The case's progress (``CaseProgress``), read on one connection: the case, the rows
        of its timeline it shows (``progress_rows``), the plan its latest proposal named and
        where the gate stands for it. A case outside ``channels`` is ``NotFound`` as an unknown
        one."""
        with self.uow.connection() as conn:
            case = store.read_case(conn, case_id, channels)
            if case is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            entries = entries_of(timeline_view(row) for row in progress_rows(conn, case_id))
            digest = latest_plan_hash(entries)
            plan = None if digest is None else store.plan_by_hash(conn, case_id, digest)
            gate = None if plan is None else gate_status(conn, self.policy, case, plan)
        return CaseProgress(case_view(case), entries,
                            None if plan is None else current_plan(plan), gate)


def _may_name(case: CaseView) -> None:
    """``InvalidRequest`` unless ``case`` may still name its components: once, before any plan
    reaches the gate."""
    if case.get("components"):
        raise InvalidRequest(f"the case already names {', '.join(case['components'])}; "
                             "components are named once", problems=["components: already named"])
    if case["status"] not in NAMING_STATUSES:
        raise InvalidRequest(f"the case is {case['status']}: components are named before a plan "
                             "reaches the gate", problems=["status: too late"])
