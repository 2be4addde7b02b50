"""The case state machine: which event moves a case from which status to which, decided purely.

``decide(status, event)`` is total: every (status, event) pair gives either an ``Accepted`` move
or a ``MoveRefused`` value (a ``Refused``), never an exception. Guards that need data (the plan,
the approvals) are run by the service after a move is accepted here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.domain.refusal import Refused


class CaseStatus(StrEnum):
    NEW = "NEW"
    ANALYZING = "ANALYZING"
    PLANNING = "PLANNING"
    WAIT_GATE = "WAIT_GATE"
    EXECUTING = "EXECUTING"
    VERIFYING = "VERIFYING"
    PARKED = "PARKED"
    CLOSED = "CLOSED"


class CaseEvent(StrEnum):
    START_ANALYSIS = "start_analysis"
    ANALYSIS_DONE = "analysis_done"
    PLAN_READY = "plan_ready"
    GATE_APPROVED = "gate_approved"
    GATE_REJECTED = "gate_rejected"
    GATE_EXPIRED = "gate_expired"  # nobody decided within OPSGATE_APPROVAL_TTL_S
    EXEC_DONE = "exec_done"
    EXEC_FAILED = "exec_failed"
    VERIFY_PASS = "verify_pass"  # noqa: S105 (an FSM event, not a password)
    VERIFY_FAILED = "verify_failed"
    RESUME = "resume"
    FIX = "fix"


S, E = CaseStatus, CaseEvent

TRANSITIONS: dict[tuple[CaseStatus, CaseEvent], CaseStatus] = {
    (S.NEW, E.START_ANALYSIS): S.ANALYZING,
    (S.ANALYZING, E.ANALYSIS_DONE): S.PLANNING,
    (S.PLANNING, E.PLAN_READY): S.WAIT_GATE,
    (S.WAIT_GATE, E.GATE_APPROVED): S.EXECUTING,
    (S.WAIT_GATE, E.GATE_REJECTED): S.PARKED,
    (S.WAIT_GATE, E.GATE_EXPIRED): S.PARKED,
    (S.EXECUTING, E.EXEC_DONE): S.VERIFYING,
    (S.EXECUTING, E.EXEC_FAILED): S.PARKED,
    (S.VERIFYING, E.VERIFY_PASS): S.CLOSED,
    (S.VERIFYING, E.VERIFY_FAILED): S.PARKED,
    (S.PARKED, E.RESUME): S.PLANNING,
    (S.PARKED, E.FIX): S.PLANNING,
}
"""The whole FSM of DESIGN.md, plus the gate's expiry (a plan nobody decided in time parks the
case, docs/approvals.md); anything not listed here is illegal."""

INITIAL_STATUS = S.NEW
TERMINAL_STATUSES = frozenset({S.CLOSED})


@dataclass(frozen=True)
class Accepted:
    """The FSM allows ``event`` to move the case from ``source`` to ``target``."""

    source: CaseStatus
    event: CaseEvent
    target: CaseStatus


@dataclass(frozen=True)
class MoveRefused(Refused):
    """The FSM has no move for ``event`` from ``source``; ``allowed`` lists what it would take."""

    source: CaseStatus
    event: CaseEvent
    allowed: tuple[CaseEvent, ...]

    @classmethod
    def of(cls, source: CaseStatus, event: CaseEvent) -> MoveRefused:
        """The refusal of ``event`` from ``source``, saying which events would be allowed."""
        allowed = allowed_events(source)
        options = ", ".join(allowed) or "none: the case is closed"
        reason = f"{event} is not allowed from {source} (allowed: {options})"
        return cls(reason, source, event, allowed)


Decision = Accepted | MoveRefused


def allowed_events(status: CaseStatus) -> tuple[CaseEvent, ...]:
    """The events the FSM accepts from ``status``, in declaration order."""
    return tuple(event for (source, event) in TRANSITIONS if source is status)


def decide(status: CaseStatus, event: CaseEvent) -> Decision:
    """Decide, without I/O, whether ``event`` may move a case in ``status`` and where to."""
    target = TRANSITIONS.get((status, event))
    if target is None:
        return MoveRefused.of(status, event)
    return Accepted(status, event, target)


def fold(events: list[CaseEvent]) -> CaseStatus:
    """The status reached by applying accepted ``events`` in order from the initial status.

    Raises ``ValueError`` on an event the FSM would have refused: a timeline of accepted events
    must always fold.
    """
    status = INITIAL_STATUS
    for event in events:
        decision = decide(status, event)
        if isinstance(decision, MoveRefused):
            raise ValueError(decision.reason)
        status = decision.target
    return status
