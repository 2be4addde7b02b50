"""Where a ``cmd.*`` consumer starts: the case the command names, still in the status and at the
version the command was emitted at (otherwise the command is stale), and its plan; and what the
notes of that case version already record of its work."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from uuid import UUID

from core.cases.service import CaseService
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseStatus
from core.domain.messages import CommandPayload
from core.domain.views import CaseView
from core.errors import NotFound
from core.gateway.keys import session_of

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Mapping[str, object])


@dataclass(frozen=True)
class CommandRun:
    """One consumer's run of one ``cmd.*`` command on one case version, with the plan it names.
    Every key its effects use derives from it, so a redelivery, or another message for the same
    case version, replays instead of repeating."""

    consumer: str
    case_id: UUID
    version: int
    plan_hash: str | None
    plan: dict[str, Any] | None  # None: the plan the command names is not stored (or not read)
    # The case as read for the stale check (a run built by hand may leave it empty).
    case: CaseView = field(default_factory=lambda: cast(CaseView, {}))

    @property
    def key(self) -> str:
        return f"{self.consumer}:{self.case_id}:{self.version}"

    @property
    def session_id(self) -> str:
        """The gateway session of the case's thread."""
        return session_of(self.case_id)


def current_run(cases: CaseService, consumer: str, payload: CommandPayload,
                expected: CaseStatus, *, with_plan: bool = True) -> CommandRun | None:
    """The run the command asks for, or None when it is stale: the case is gone, not in
    ``expected`` or no longer at the payload's version (someone moved it on). Consumers that
    never use the plan pass ``with_plan=False`` and save its read."""
    case_id, version = UUID(str(payload["case_id"])), int(payload["version"])
    try:
        case = cases.get_case(case_id)
    except NotFound:
        log.warning("%s: case %s does not exist; command ignored", consumer, case_id)
        return None
    if case["status"] != expected or case["version"] != version:
        log.info("%s: stale command for case %s (wants %s v%d, case is %s v%d)", consumer,
                 case_id, expected, version, case["status"], case["version"])
        return None
    digest = None if payload.get("plan_hash") is None else str(payload["plan_hash"])
    found = cases.proposed_plan(case_id, digest) if with_plan else None
    if found is None:
        return CommandRun(consumer, case_id, version, digest, None, case)
    return CommandRun(consumer, case_id, version, str(found["plan_hash"]), found["plan"], case)


def move_case(cases: CaseService, run: CommandRun, cmd: TransitionCase,
              inbox_entry: tuple[str, int]) -> None:
    """Move the case by ``cmd`` under the run's key, marking the delivery in the same
    transaction. A case that moved on first is logged, not retried; any other refusal raises."""
    reply = cases.transition(cmd, run.key, inbox_entry=inbox_entry)
    if reply.moved_on:
        log.info("%s: case %s moved on first (%s)", run.consumer, run.case_id, reply.body)
        return
    reply.data()


def noted(cases: CaseService, run: CommandRun, event: str, shape: type[F]) -> list[F]:
    """The facts the notes ``event`` of the run's case version and plan recorded (by any actor),
    oldest first, read as ``shape``: the TypedDict their writer noted them as."""
    return [entry.facts_as(shape) for entry in cases.timeline_of(run.case_id, event)
            if entry.version == run.version
            and entry.noted_plan == run.plan_hash]
