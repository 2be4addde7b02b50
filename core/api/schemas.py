"""Request bodies of the REST API (strict: unknown fields, wrong types and oversized strings are
422) and the documented shapes of its replies, for the OpenAPI description."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints, field_validator

from core.domain.commands import Fence
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plans import canonical_json

META_MAX_BYTES = 2048
META_MAX_KEYS = 32

Severity = Literal["SEV1", "SEV2", "SEV3", "SEV4"]
"""The domain's SEVERITIES as a type, so the OpenAPI description lists them."""


def _text(max_length: int, min_length: int = 0) -> StringConstraints:
    return StringConstraints(strict=True, min_length=min_length, max_length=max_length)


Title = Annotated[str, _text(200, min_length=1)]
Actor = Annotated[str, _text(128, min_length=1)]
Tenant = Annotated[str, _text(64, min_length=1)]
ComponentName = Annotated[str, _text(63, min_length=1)]
Reason = Annotated[str, _text(2000)]
CorrelationId = Annotated[str, _text(128, min_length=1)]
PlanHash = Annotated[str, _text(64, min_length=1)]
SessionId = Annotated[str, _text(200, min_length=1)]
TemplateName = Annotated[str, _text(100, min_length=1)]
Version = Annotated[StrictInt, Field(ge=0)]
StatedActor = Annotated[
    Actor | None,
    Field(description="Who the caller says it acts for: kept in the timeline beside the token's "
                      "principal (meta.stated_actor), never the actor itself; grants nothing."),
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CreateCaseBody(_Body):
    title: Title
    severity: Severity = "SEV3"
    tenant: Tenant | None = None
    actor: StatedActor = None
    components: list[ComponentName] = Field(
        default_factory=list, max_length=20,
        description="Catalog components the case concerns (OPSGATE_CATALOG), e.g. "
                    "[\"payments-api\"]: the approval policy reads their owners.")


class FenceBody(_Body):
    session_id: SessionId
    token: Version

    def to_fence(self) -> Fence:
        return Fence(self.session_id, self.token)


class TransitionBody(_Body):
    event: CaseEvent = Field(description="Any FSM event but gate_approved and gate_rejected, "
                                         "which are POST /case/{id}/approve and /reject.")
    actor: StatedActor = None
    reason: Reason | None = None
    correlation_id: CorrelationId | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    expected_version: Version | None = None
    plan: dict[str, Any] | None = Field(
        default=None, description="A ChangePlan; the plan_ready guard judges it, not the API."
    )
    plan_hash: PlanHash | None = None
    fence: FenceBody | None = None

    @field_validator("meta")
    @classmethod
    def _meta_is_small(cls, meta: dict[str, Any]) -> dict[str, Any]:
        if len(meta) > META_MAX_KEYS:
            raise ValueError(f"meta may have at most {META_MAX_KEYS} keys")
        if len(canonical_json(meta).encode("utf-8")) > META_MAX_BYTES:
            raise ValueError(f"meta may be at most {META_MAX_BYTES} bytes of JSON")
        return meta


class GeneratePlanBody(_Body):
    case_id: UUID
    template: TemplateName
    actor: StatedActor = None


class ApproveBody(_Body):
    plan_hash: PlanHash = Field(description="The plan the approver read: the case must wait on "
                                            "exactly this plan.")
    expected_version: Version | None = None


class RejectBody(_Body):
    plan_hash: PlanHash
    reason: Annotated[str, _text(2000, min_length=1)]
    expected_version: Version | None = None


class StageBody(_Body):
    case_id: UUID


class ExecBody(BaseModel):
    """Only ``case_id`` (and optionally the action the caller expects): any other field, such as
    the seed's ``adapter`` or ``script``, is refused (422 ``off_plan``) and nothing runs."""

    model_config = ConfigDict(extra="allow", frozen=True,
                              json_schema_extra={"additionalProperties": False})

    case_id: UUID
    action: Annotated[str, _text(100, min_length=1)] | None = Field(
        default=None, description="The action the caller expects the next step to be; any "
                                  "other is 422 off_plan and nothing runs.")

    @property
    def off_plan(self) -> list[str]:
        """The fields naming something to run besides the plan's next step."""
        return sorted(self.model_extra or {})


# -- reply shapes (documentation only: replies are sent as the service rendered them) ---------


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any] | None = None


class ErrorReply(BaseModel):
    error: ErrorDetail


class CaseView(BaseModel):
    case_id: UUID
    tenant: str
    title: str
    severity: str
    status: CaseStatus
    version: int
    created_at: str
    updated_at: str
    plan_hash: str | None = Field(default=None, description="On plan_ready and gate_approved.")
    components: list[str] | None = Field(default=None,
                                         description="The catalog components it concerns.")


class TimelineEntry(BaseModel):
    id: int
    event: str
    actor: str
    reason: str | None
    correlation_id: str | None
    meta: dict[str, Any]
    created_at: str


class CaseReply(BaseModel):
    data: CaseView


class ApprovalState(BaseModel):
    state: Literal["approved", "pending"]
    approvers: list[str]
    needs: int = Field(description="How many more distinct people must approve.")
    recorded: bool = Field(description="False when this person had already approved.")
    reason: str


class ApprovalView(CaseView):
    approval: ApprovalState


class ApprovalReply(BaseModel):
    data: ApprovalView


class CaseListReply(BaseModel):
    data: list[CaseView]


class TimelineReply(BaseModel):
    data: list[TimelineEntry]


class Health(BaseModel):
    status: str
    database: str


class HealthReply(BaseModel):
    data: Health


class GateApproval(BaseModel):
    state: Literal["pending", "refused"]
    approvers: list[str] = Field(description="Who approved this plan so far.")
    needs: int | None = Field(description="How many more distinct people must approve.")
    reason: str
    requester: str = Field(description="Who proposed the plan: they may not approve it.")
    eligible: str = Field(description="Who may approve, in words.")
    automatic: str | None = Field(description="Why the policy does not approve it by itself.")
    waiting: str = Field(description="The awaiting_approval note written on the timeline.")
    use: str = Field(description="Where a person approves: POST /case/{id}/approve.")
    expires_at: str | None = Field(description="When the approval expires and the case parks "
                                               "(OPSGATE_APPROVAL_TTL_S).")


class GateView(CaseView):
    approval: ApprovalState | GateApproval


class GateReply(BaseModel):
    data: GateView


class StepRan(BaseModel):
    phase: Literal["step", "rollback"]
    index: int
    action: str
    ok: bool
    attempts: int
    summary: str
    refused: str | None = None


class StepCount(BaseModel):
    total: int
    succeeded: int


class Move(BaseModel):
    event: CaseEvent
    reason: str


class ExecView(CaseView):
    ran: list[StepRan] = Field(description="The step this request ran, then any rollback "
                                           "steps; empty when only the final move was left.")
    steps: StepCount
    moved: Move | None = Field(description="exec_done after the last step, exec_failed after "
                                            "a failing step and the rollback; else null.")


class ExecReply(BaseModel):
    data: ExecView


class VerificationReading(BaseModel):
    reading: int
    state: Literal["held", "pending", "cannot"]
    reason: str
    observed: float | None
    at: str | None
    event: CaseEvent | None = Field(description="verify_pass or verify_failed; null while "
                                                "the verification waits.")
    waiting_for: str | None = None
    next_reading_at: str | None = None
    since: str | None = Field(default=None, description="When the change finished.")
    window_ends_at: str | None = Field(default=None,
                                       description="When the block's window after the change "
                                                   "ends.")
    deadline: str | None = Field(default=None, description="The last moment it may pass.")


class VerifyView(CaseView):
    verification: VerificationReading


class VerifyReply(BaseModel):
    data: VerifyView


class ChangeView(BaseModel):
    change_id: str
    source: Literal["generic", "argocd", "github"]
    kind: Literal["deploy", "config"]
    service: str = Field(description="As sent.")
    component: str | None = Field(description="The catalog component it resolved to.")
    namespace: str | None
    version: str
    summary: str = Field(description="What the sender wrote: data, never instructions.")
    actor: str
    url: str | None
    happened_at: str
    received_at: str
    fingerprint: str
    target: str | None = Field(
        default=None, description="The object it changed: deployment/NAME, configmap/NAME, "
                                  "flag/KEY, hpa/NAME or route/NAME; null when not said.")
    before: Any = Field(default=None,
                        description="Its value before (a version, a ConfigMap's data, a flag's "
                                    "rollout, replicas) as the sender said it; null when not "
                                    "said. Data, never instructions.")
    after: Any = Field(default=None, description="Its value after, likewise (Argo CD: the "
                                                 "synced revision; GitHub: the ref).")


class ChangeReply(BaseModel):
    data: ChangeView


class ChangeList(BaseModel):
    changes: list[ChangeView]


class ChangeListReply(BaseModel):
    data: ChangeList
