"""What the case service answers: a ``Reply[T]``, its ``ReplyOutcome`` and the exact JSON bytes
a repeat of the request gets again; ``data()`` is the typed ``T`` or the refusal raised."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar, cast

from core.domain.plans import canonical_json
from core.errors import IllegalTransition, OpsgateError, PreconditionFailed, error_from_body

T = TypeVar("T", covariant=True)
D = TypeVar("D")


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
class Reply(Generic[T]):
    """A business outcome and its canonical JSON body: ``{"data": ...}`` (a ``T``) when it is
    done, the refusal's ``{"error": ...}`` otherwise."""

    outcome: ReplyOutcome
    body: str
    replayed: bool = False

    @staticmethod
    def of_data(data: D, outcome: ReplyOutcome = ReplyOutcome.DONE) -> Reply[D]:
        return Reply(outcome, canonical_json({"data": data}))

    @staticmethod
    def of_error(error: OpsgateError) -> Reply[Any]:
        moved_on = isinstance(error, IllegalTransition | PreconditionFailed)
        return Reply(ReplyOutcome.MOVED_ON if moved_on else ReplyOutcome.REFUSED,
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

    def data(self) -> T:
        """The reply's data; the matching ``OpsgateError`` when it is a refusal."""
        error = self.error
        if error is not None:
            raise error
        # The body is the JSON of a T the service built (TypedDicts and lists of them).
        return cast(T, json.loads(self.body)["data"])
