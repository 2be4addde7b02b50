"""The shapes of a case, its timeline, its proposed plan and its approvals wherever they are read:
REST bodies, chat cards, the consumers, the agent's and the MCP server's tools. TypedDicts, so
they stay the JSON-ready dicts they were."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class CaseView(TypedDict):
    """A case as every reply shows it (``CaseService.get_case``, ``list_cases``)."""

    case_id: str
    tenant: str
    title: str
    severity: str
    status: str
    version: int
    created_at: str  # ISO 8601, UTC
    updated_at: str
    components: NotRequired[list[str]]  # the catalog components it concerns, when named


class MovedCase(CaseView):
    """The case as a move leaves it (``CaseService.transition``, ``reject_plan``); a move that
    concerns a plan (plan_ready and the gate's moves) names it."""

    plan_hash: NotRequired[str]


class NotedCase(CaseView):
    """The case a note was recorded on (``CaseService.note``), and the note's event."""

    note: str


class TimelineEntry(TypedDict):
    """One row of a case's timeline (``CaseService.timeline``), oldest first."""

    id: int
    event: str
    actor: str
    reason: str | None
    correlation_id: str | None
    meta: dict[str, Any]  # the move's or note's facts: free-form JSON
    created_at: str  # ISO 8601, UTC


class ProposedPlan(TypedDict):
    """A plan proposed for a case (``CaseService.proposed_plan``)."""

    plan_hash: str
    plan: dict[str, Any]  # the stored ChangePlan JSON: parse_plan reads it as a ParsedPlan
    case_version: int  # the case's version when the plan was proposed
    proposed_by: str


DecisionKind = Literal["approved", "rejected", "expired"]
"""What one ``plan_approved`` row records: a yes, a no, or the plan's expiry."""


class ApprovalDecision(TypedDict):
    """One decision on one proposal of a plan, as its ``plan_approved`` row keeps it."""

    approver: str
    at: str  # ISO 8601, UTC
    verdict: NotRequired[DecisionKind]  # a row kept before no's and expiries were: a yes
    reason: NotRequired[str]


class ApprovalState(TypedDict):
    """Where the gate stands after a yes, as an approval reply says it."""

    state: Literal["approved", "pending", "refused"]
    approvers: list[str]
    needs: int | None  # more distinct approvers needed; None when refused
    recorded: NotRequired[bool]  # whether this yes was recorded; absent where nobody decided
    reason: str


class ApprovalView(CaseView):
    """The case after one yes (``CaseService.approve_plan``): the plan and where its gate stands
    (moved to EXECUTING when approved)."""

    plan_hash: str
    approval: ApprovalState
