"""The gate: the one module that decides on the plan a case waits on — may a plan come to the
gate (``plan_ready``), may this person (or the gatekeeper) approve or reject it now, is the gate
decided, has its approval expired, does a plan approve itself.

The case service asks it once per decision, inside the transaction that locks the case, and
writes the rows it rules; the Slack front end asks the same rules through the service
(``CaseService.may_reject``). The policy itself (who, how many, how long) is the pure
``core.domain.policy``; where the gate stands for a plan is ``core.cases.gate_status``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid4

from sqlalchemy import Connection

from core.cases import handlers
from core.cases.approvals import (
    DecisionRow,
    approval_state,
    decision_row,
    recorded_approvals,
    requesters_of,
    waited_plan,
    why_closed,
)
from core.cases.rows import (
    TimelineRow,
    case_components,
    case_view,
    correlation_of,
    timeline_row,
)
from core.cases.timeline import attempt_moves
from core.cases.uow import refuse
from core.clock import Clock
from core.db import case_store as store
from core.domain.attempts import repeat_refusal
from core.domain.commands import ApprovePlan, RejectPlan, TransitionCase
from core.domain.dry_run import DryRunReport
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import ApprovalRecordedFacts, NotePayload, Topic, note_message
from core.domain.plans import plan_hash, plan_problems
from core.domain.policy import (
    AUTO_APPROVER,
    Approval,
    ApprovalPolicy,
    Pending,
    PlanLike,
    Satisfied,
    Verdict,
)
from core.domain.promql import Labels, QueryBounds
from core.domain.refusal import Refused
from core.domain.verify import NO_METRICS_SOURCE, parse_verify, query_problems
from core.domain.views import ApprovalState, ApprovalView, MovedCase
from core.errors import (
    ApprovalRefused,
    GuardFailed,
    IllegalTransition,
    OpsgateError,
    VersionConflict,
)
from core.investigate.scope import Target, metric_scopes, scope_of

Row = Mapping[Any, Any]


@dataclass(frozen=True)
class Ruling:
    """The gate's answer to one yes: the plan, the verdict on this proposal's yeses with this
    one, and this yes's ``plan_approved`` row (None when the approver had said yes before, or
    is refused: nothing new to record)."""

    plan: Row
    verdict: Verdict
    approval: DecisionRow | None

    @property
    def plan_hash(self) -> str:
        return str(self.plan["plan_hash"])

    def state(self) -> ApprovalState:
        """What an approval reply says about the gate: approved, or pending and how many more."""
        return approval_state(self.verdict, recorded=self.approval is not None)

    def admitted(self) -> str:
        """The plan's hash when the gate is decided; else the ``gate_approved`` guard's refusal
        (``ApprovalRefused``, or ``GuardFailed`` while more approvers are needed)."""
        if isinstance(self.verdict, Refused):
            reason = self.verdict.reason
            raise ApprovalRefused(reason, problems=[f"approver: {reason}"])
        if isinstance(self.verdict, Pending):
            raise GuardFailed(f"the approvals do not satisfy the policy yet: {self.verdict.reason}",
                              problems=[f"approvals: {self.verdict.needs} more distinct "
                                        "approver(s) needed"])
        return self.plan_hash


def automatic_approval(policy: ApprovalPolicy, case_id: UUID, plan: PlanLike, digest: str, *,
                       version: int, correlation_id: str | None,
                       attribution: Mapping[str, str] | None = None,
                       components: Sequence[str] = ()) -> ApprovePlan | None:
    """The gatekeeper's own yes to the plan ``digest`` the case waits on at ``version``, when
    the policy lets the plan approve itself; None when people must decide it."""
    if not policy.at(components, None).auto_approves(plan):
        return None
    return ApprovePlan(case_id, digest, AUTO_APPROVER, correlation_id=correlation_id,
                       expected_version=version, attribution=dict(attribution or {}))


@dataclass(frozen=True)
class Gate:
    """The gate as one case service keeps it: judged by its approval policy, stamped by its
    clock; a plan comes to it only when its checks can be judged (``reads_metrics``) and its
    queries sent (``promql``). Every method runs on the caller's connection, the case row
    already locked (or, for ``may_reject``, read)."""

    policy: ApprovalPolicy
    clock: Clock
    reads_metrics: bool = False
    promql: QueryBounds | None = None
    dry_run: DryRunReport | None = None  # of the plan a plan_ready proposes, read before it
    default_scope: Target | None = None  # whose series a case naming no component may read

    # -- a person's yes and no ------------------------------------------------------------

    def approve(self, conn: Connection, case: Row | None, cmd: ApprovePlan,
                writes: store.Writes) -> ApprovalView:
        """One yes: refused with an audit row, recorded as pending, or the case moved to
        EXECUTING when the policy is then satisfied."""
        assert case is not None, "an approval always concerns a locked case"
        plan = self._waiting_plan(conn, case, cmd, "plan_approval")
        ruling = self.approval(conn, case, plan, cmd.approver)
        verdict, digest = ruling.verdict, ruling.plan_hash
        if isinstance(verdict, Refused):
            raise refuse(ApprovalRefused(verdict.reason, approver=cmd.approver,
                                         policies=list(verdict.policies)),
                         self._gate_row(case, "plan_approval", cmd.approver, verdict.reason,
                                        cmd.correlation_id, outcome="refused",
                                        facts={"plan_hash": digest,
                                               "problems": [f"approver: {verdict.reason}"],
                                               **self._policy_facts(verdict.policies),
                                               **cmd.attribution}))
        if isinstance(verdict, Satisfied):
            approved = TransitionCase(cmd.case_id, CaseEvent.GATE_APPROVED, actor=cmd.approver,
                                      reason=verdict.reason, correlation_id=cmd.correlation_id,
                                      plan_hash=digest,
                                      meta={"approvers": list(verdict.approvers)},
                                      attribution=cmd.attribution)
            moved = handlers.move(conn, case, approved, writes, self, self.clock(), ruling)
            assert writes.timeline is not None, "the move is on the timeline"
            writes.timeline["meta"].update(self._policy_facts(verdict.policies))
            return {**moved, "plan_hash": digest, "approval": ruling.state()}
        writes.approval = ruling.approval
        if ruling.approval is not None:
            self._record_pending(case, cmd, digest, ruling, writes)
        return {**case_view(case), "plan_hash": digest, "approval": ruling.state()}

    def reject(self, conn: Connection, case: Row | None, cmd: RejectPlan,
               writes: store.Writes) -> MovedCase:
        """One no: the case parks (``gate_rejected``) with the reason."""
        assert case is not None, "a rejection always concerns a locked case"
        plan = self._waiting_plan(conn, case, cmd, "gate_rejected")
        rejected = TransitionCase(cmd.case_id, CaseEvent.GATE_REJECTED, actor=cmd.approver,
                                  reason=cmd.reason, correlation_id=cmd.correlation_id,
                                  plan_hash=str(plan["plan_hash"]), attribution=cmd.attribution)
        return handlers.move(conn, case, rejected, writes, self, self.clock())

    def _record_pending(self, case: Row, cmd: ApprovePlan, digest: str, ruling: Ruling,
                        writes: store.Writes) -> None:
        """A yes that is not yet enough: one timeline row and one event for the chat thread."""
        state = ruling.state()
        facts: ApprovalRecordedFacts = {"plan_hash": digest, "approvers": state["approvers"],
                                        "needs": state["needs"]}
        policies = self._policy_facts(getattr(ruling.verdict, "policies", ()))
        writes.timeline = self._gate_row(case, "plan_approval", cmd.approver, state["reason"],
                                         cmd.correlation_id, outcome="note",
                                         facts={**facts, **policies, **cmd.attribution})
        note: NotePayload = {"case_id": str(case["id"]), "version": case["version"],
                             "event": "plan_approval", "actor": cmd.approver,
                             "reason": state["reason"],
                             "correlation_id": writes.timeline["correlation_id"]}
        writes.outbox = [note_message(Topic.APPROVAL_RECORDED, note, facts)]

    def _policy_facts(self, policies: Sequence[str]) -> dict[str, Any]:
        """Which policies decided, and the version of the policy set they belong to."""
        return {"policies": list(policies), "policy_version": self.policy.version}

    def _waiting_plan(self, conn: Connection, case: Row, cmd: ApprovePlan | RejectPlan,
                      event: str) -> Row:
        """The plan the case waits on, which ``cmd`` must name; refusals explain themselves,
        and one that concerns the plan leaves an audit row."""
        try:
            return self.waiting(conn, case, cmd.plan_hash,
                                expected_version=cmd.expected_version, event=event)
        except GuardFailed as refused:
            raise refuse(refused, self._gate_row(
                case, event, cmd.approver, refused.message, cmd.correlation_id,
                outcome="refused", facts={"problems": refused.details.get("problems", []),
                                          **cmd.attribution},
            )) from None
        except OpsgateError as refused:  # outside the gate, or an outdated view: nothing to audit
            raise refuse(refused) from None

    def _gate_row(self, case: Row, event: str, actor: str, reason: str,
                  correlation_id: str | None, *, outcome: Literal["note", "refused"],
                  facts: Mapping[str, Any]) -> TimelineRow:
        """A timeline row about the gate that does not move the case."""
        return timeline_row(case["id"], event, actor, reason, correlation_of(correlation_id),
                            self.clock(), outcome=outcome, source=case["status"],
                            target=case["status"] if outcome == "note" else None,
                            version=case["version"], facts=facts)

    # -- the guards of the moves through the gate (``handlers.Guard``) ----------------------

    def admit(self, conn: Connection, case: Row, cmd: TransitionCase, next_version: int,
              writes: store.Writes, ruling: Ruling | None) -> str | None:
        """Run the event's guard; record what it admits. Returns the plan hash it concerns."""
        if cmd.event is CaseEvent.PLAN_READY:
            return self._admit_plan(case, cmd, next_version, writes, conn)
        if cmd.event is CaseEvent.GATE_APPROVED:
            return self._admit_approval(conn, case, cmd, writes, ruling)
        if cmd.event is CaseEvent.GATE_REJECTED:
            plan = waited_plan(conn, cmd.case_id, cmd.plan_hash, hash_required=False)
            writes.approval = self.rejection(conn, case, plan, cmd.actor, cmd.reason)
            return str(plan["plan_hash"])
        if cmd.event is CaseEvent.GATE_EXPIRED:
            plan = waited_plan(conn, cmd.case_id, cmd.plan_hash)
            writes.approval = self.expiry(case, plan, cmd.actor, cmd.reason)
            return str(plan["plan_hash"])
        return None

    def _admit_plan(self, case: Row, cmd: TransitionCase, next_version: int,
                    writes: store.Writes, conn: Connection) -> str:
        """plan_ready only with a complete plan whose checks can be judged and sent."""
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
            refused = query_problems(block, self.promql, case["tenant"],
                                     self.metric_scope(case_components(case)))
            if refused:
                raise GuardFailed("the plan's verify query would not be sent to Prometheus: "
                                  f"{refused[0]}", problems=[f"plan.{p}" for p in refused])
        digest = plan_hash(plan)
        self._admit_attempt(conn, cmd.case_id, digest)
        writes.plan = {"id": uuid4(), "case_id": cmd.case_id, "case_version": next_version,
                       "plan_hash": digest, "plan": dict(plan),
                       "proposed_by": cmd.requester or cmd.actor}
        return digest

    def metric_scope(self, components: Sequence[str]) -> tuple[Labels, ...]:
        """The metric labels of each component whose series a case naming ``components`` may
        read (``core/investigate/scope.py``, as the investigator's ``query_metrics``)."""
        return metric_scopes(scope_of(self.policy.catalog(), components, self.default_scope))

    def _admit_attempt(self, conn: Connection, case_id: UUID, digest: str) -> None:
        """A plan comes to the gate only when it can run (its dry run refused no step) and is
        not one that already failed on the case or that a person rejected, unless a person
        asked for it again."""
        if self.dry_run is not None and self.dry_run.digest == digest and self.dry_run.refused:
            raise GuardFailed(self.dry_run.reason(),
                              problems=[f"dry run: {line.text}" for line in self.dry_run.refused])
        repeated = repeat_refusal(digest, attempt_moves(conn, case_id, digest))
        if repeated is not None:
            raise GuardFailed(repeated, problems=[f"plan: {digest} was declined on the case"])

    def _admit_approval(self, conn: Connection, case: Row, cmd: TransitionCase,
                        writes: store.Writes, ruling: Ruling | None) -> str:
        """gate_approved only when the gate is decided: by the ruling ``approve`` already made
        on this click, else (a raw gate_approved) by the gate's ruling on the actor's yes."""
        if ruling is None:
            plan = waited_plan(conn, cmd.case_id, cmd.plan_hash)
            ruling = self.approval(conn, case, plan, cmd.actor)
        digest = ruling.admitted()
        writes.approval = ruling.approval
        return digest

    # -- the rules ------------------------------------------------------------------------

    def waiting(self, conn: Connection, case: Row, digest: str, *,
                expected_version: int | None, event: str) -> Row:
        """The plan the case waits on, when a decision naming ``digest``, made on the case at
        ``expected_version``, may be taken now. ``IllegalTransition`` outside the gate (saying
        whether this plan was decided or its approval expired), ``VersionConflict`` on an
        outdated view, then ``waited_plan``'s refusals."""
        status, version = CaseStatus(case["status"]), int(case["version"])
        if status is not CaseStatus.WAIT_GATE:
            raise IllegalTransition(f"the case is {status}, not waiting at the gate: "
                                    f"{why_closed(conn, case['id'], digest)}",
                                    status=str(status), event=event)
        if expected_version is not None and expected_version != version:
            raise VersionConflict(
                f"case is at version {version}, not {expected_version}: the decision was "
                "made on an outdated view", expected_version=expected_version, version=version)
        return waited_plan(conn, case["id"], digest)

    def approval(self, conn: Connection, case: Row, plan: Row, approver: str) -> Ruling:
        """``approver``'s yes to ``plan``, judged once with the yeses recorded for this proposal:
        a yes said before counts once and records nothing new. The row names the policies that
        admitted the yeses and the policy set's version."""
        approvals = recorded_approvals(store.plan_decisions(conn, plan["id"]), plan)
        fresh = approver not in {approval.approver for approval in approvals}
        if fresh:
            approvals.append(Approval(approver, str(plan["plan_hash"])))
        policy = self.policy_at(case, requesters_of(conn, case, plan))
        verdict = policy.evaluate(plan["plan"], str(plan["proposed_by"]), approvals)
        row = None
        if fresh and not isinstance(verdict, Refused):
            row = decision_row(plan, approver, "approved", self._moment(policy),
                               policies=verdict.admitted.get(approver, ()),
                               policy_version=policy.version)
        return Ruling(plan, verdict, row)

    def policy_at(self, case: Row, requesters: Sequence[str] = ()) -> ApprovalPolicy:
        """The policy as it judges a plan of ``case`` now: with the components it names and
        everyone who asked for the plan (``requesters_of``)."""
        return self.policy.at(case_components(case), self.clock(), requesters)

    @staticmethod
    def _moment(policy: ApprovalPolicy) -> datetime:
        assert policy.now is not None, "policy_at sets the moment"
        return policy.now

    def refusal(self, conn: Connection, case: Row, plan: Row, person: str) -> str | None:
        """Why ``person`` may not decide ``plan`` at all (a requester, not an approver, an
        ineligible gatekeeper, a policy's forbid); None when they may."""
        policy = self.policy_at(case, requesters_of(conn, case, plan))
        return policy.refusal(person, str(plan["proposed_by"]), plan["plan"])

    def rejection(self, conn: Connection, case: Row, plan: Row, approver: str,
                  reason: str | None) -> DecisionRow:
        """``approver``'s no to ``plan`` as its ``plan_approved`` row; ``ApprovalRefused`` when
        they may not decide it."""
        policy = self.policy_at(case, requesters_of(conn, case, plan))
        subject = policy.subject(plan["plan"], str(plan["proposed_by"]))
        judged = policy.judge(subject, approver)
        if not judged.allowed:
            refused = policy.refusal_words(approver, subject, judged)
            raise ApprovalRefused(refused, problems=[f"approver: {refused}"])
        return decision_row(plan, approver, "rejected", self._moment(policy), reason,
                            policies=judged.permits, policy_version=policy.version)

    def expiry(self, case: Row, plan: Row, actor: str, reason: str | None) -> DecisionRow:
        """The expiry of ``plan``'s approval as its ``plan_approved`` row, once it has waited the
        policy's TTL since it reached the gate (the case's last move); ``GuardFailed`` before."""
        due = self.policy.approval_expires_at(store.as_utc(case["updated_at"]))
        now = self.clock()
        ttl = self.policy.describe_ttl()
        if now < due:
            raise GuardFailed(
                f"the plan's approval expires at {due:%Y-%m-%d %H:%M:%S} UTC, "
                f"{ttl} after it reached the gate; not before",
                problems=[f"expires_at: {due.isoformat()}"])
        return decision_row(plan, actor, "expired", now, reason or f"approval expired after {ttl}")

    def may_reject(self, conn: Connection, case: Row, digest: str, person: str, *,
                   expected_version: int | None) -> bool:
        """Whether ``person``'s no to the plan ``digest`` names, made on the case at
        ``expected_version``, would be taken now: the very checks ``reject`` makes."""
        try:
            plan = self.waiting(conn, case, digest, expected_version=expected_version,
                                event="gate_rejected")
        except OpsgateError:
            return False
        return self.refusal(conn, case, plan, person) is None
