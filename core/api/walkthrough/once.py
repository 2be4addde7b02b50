"""A walkthrough request carried out once per Idempotency-Key, as the caller's run of the case.

The request runs as one gateway call (``api.stage``) keyed by the Idempotency-Key, so a repeat
gets the first answer, refusals included, and the key sent with another request is refused.
Inside, every effect keeps the key the consumer's work derives from the case version (a step's
attempt, a verification reading), so a request under a new key replays what already ran
instead of running it again."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict
from uuid import UUID

from core.cases.replies import Reply, ReplyOutcome
from core.cases.service import CaseService
from core.consumers.runs import CommandRun, current_run
from core.domain.fsm import CaseStatus
from core.domain.messages import CommandPayload
from core.errors import IllegalTransition, KeyReuse, Unavailable, error_from_body
from core.gateway import CallStatus, ToolCall, session_of

if TYPE_CHECKING:
    from core.bootstrap import App

STAGE_TOOL = "api.stage"


@dataclass(frozen=True)
class Caller:
    """Who asks for a stage: the principal's actor and name, the request's Idempotency-Key and
    correlation id."""

    actor: str
    principal: str
    key: str
    correlation_id: str | None = None

    @property
    def attribution(self) -> dict[str, str]:
        return {"principal": self.principal}


class KeptReply(TypedDict):
    """A reply as the gateway keeps it for every repeat of the request."""

    outcome: str  # a ReplyOutcome
    body: str


def once(app: App, caller: Caller, endpoint: str, case_id: UUID, request: Mapping[str, Any],
         answer: Callable[[], Reply[Any]], lease_s: float = 0.0) -> Reply[Any]:
    """``answer()`` the first time the caller's key comes with this request; its reply,
    replayed, every later time; ``KeyReuse`` when the key came with another request."""
    app.cases.get_case(case_id)  # an unknown case is NotFound, and nothing is kept of it
    call = ToolCall(STAGE_TOOL, actor=caller.actor, session_id=session_of(case_id),
                    args={"endpoint": endpoint, "case_id": str(case_id),
                          "actor": caller.actor, **request},
                    business_key=f"idempotency-key:{caller.key}")
    lease_s = max(app.settings.gateway_lease_s, lease_s)
    # Idempotent: every effect inside is keyed, so a retry after a crash may redo the stage.
    result = app.gateway.run(call, lambda _args: kept(answer()), lease_s=lease_s,
                             wait_s=lease_s, idempotent=True)
    if result.status is CallStatus.IN_PROGRESS:
        raise Unavailable("this request is still being carried out; retry with the same "
                          "Idempotency-Key", key=caller.key)
    if isinstance(result.refusal, KeyReuse):
        return Reply.of_error(KeyReuse("this Idempotency-Key was used before for a "
                                       "different request", key=caller.key))
    if result.error is not None or not isinstance(result.result, Mapping):
        raise Unavailable(f"the request's outcome was not kept: {result.error}",
                          key=caller.key)
    return unkept(result.result, replayed=result.status is CallStatus.REPLAYED)


def caller_run(cases: CaseService, caller: Caller, case_id: UUID, expected: CaseStatus,
               endpoint: str) -> CommandRun | Reply[Any]:
    """The caller's run of the case's current version, or ``IllegalTransition`` when the case
    is not in ``expected``."""
    case = cases.get_case(case_id)
    run = None
    if case["status"] == expected:
        command: CommandPayload = {"case_id": str(case_id), "version": case["version"],
                                   "correlation_id": None}
        run = current_run(cases, caller.actor, command, expected)
    if run is None:
        return Reply.of_error(IllegalTransition(
            f"{endpoint} needs a case in {expected}; this one is {case['status']}",
            status=case["status"], expected=str(expected)))
    return run


def kept(reply: Reply[object]) -> KeptReply:
    """A reply as the gateway keeps it, for every repeat of the request."""
    return {"outcome": str(reply.outcome), "body": reply.body}


def unkept(stored: Mapping[str, Any], *, replayed: bool) -> Reply[Any]:
    """The reply ``kept`` stored. One kept before replies had an outcome (with the status
    the API sent, for a day in Redis and in older ledger rows) has it read off its body: a
    refusal's error, or a verification that waits."""
    body = str(stored["body"])
    if "outcome" in stored:
        return Reply(ReplyOutcome(stored["outcome"]), body, replayed=replayed)
    parsed = json.loads(body)
    if "error" in parsed:
        refused = Reply.of_error(error_from_body(parsed)).outcome
        return Reply(refused, body, replayed=replayed)
    waits = (parsed["data"].get("verification") or {"event": "-"})["event"] is None
    return Reply(ReplyOutcome.WAITING if waits else ReplyOutcome.DONE, body, replayed=replayed)
