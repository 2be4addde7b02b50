"""What the gateway speaks: a tool call, the result envelope every caller gets (it raises
``ToolCallFailed`` on demand), and the business refusal a tool body raises for a deterministic
"no"."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from core.errors import InternalError, OpsgateError, StaleFence, Unavailable, error_from_body

ToolBody = Callable[[Mapping[str, Any]], Any]
"""The function behind a tool: it receives the call's arguments and does the side effect."""


@dataclass(frozen=True)
class ToolCall:
    """One side-effecting call: ``session_id`` is one agent session, i.e. one case thread."""

    tool: str
    args: Mapping[str, Any]
    actor: str
    session_id: str
    business_key: str | None = None


class CallStatus(StrEnum):
    OK = "ok"  # this call ran the executor
    REPLAYED = "replayed"  # an earlier call ran it; this is its stored outcome
    IN_PROGRESS = "in_progress"  # another call is running it right now
    REFUSED = "refused"  # nothing ran: see ``error["code"]``


@dataclass(frozen=True)
class CallResult:
    """The envelope every caller gets back, first arrival or repeat."""

    status: CallStatus
    key: str
    result: Any = None
    error: dict[str, Any] | None = None
    fence: int | None = None
    latency_s: float = 0.0
    attempts: int = 1

    @property
    def ok(self) -> bool:
        """The side effect happened (now or earlier) and succeeded."""
        return self.status in (CallStatus.OK, CallStatus.REPLAYED) and self.error is None

    @property
    def refusal(self) -> OpsgateError | None:
        """The stored refusal as its typed error (``KeyReuse``, ``StaleFence``, a tool's own
        refusal); None when nothing was refused."""
        return None if self.error is None else error_from_body({"error": self.error})

    def raise_for_error(self, doing: str) -> None:
        """Raise ``ToolCallFailed`` unless the side effect happened and succeeded; ``doing``
        says what the call was for."""
        if not self.ok:
            raise ToolCallFailed(f"{doing}: {self.status} {self.error}", key=self.key,
                                 status=str(self.status), error=self.error)


class ToolCallFailed(InternalError):
    """A gateway call that did not succeed: refused, or still running elsewhere. Details: the
    call's ``key``, its ``status`` and the stored ``error``."""

    code = "tool_call_failed"


class BusinessRefusal(OpsgateError):
    """Raised by an executor for a deterministic business "no" (insufficient funds, unknown
    SKU): stored and replayed to every repeat, never retried."""

    code = "business_refusal"

    def __init__(self, message: str, code: str = "business_refusal", **details: Any) -> None:
        super().__init__(message, **details)
        self.code = code

    def to_error(self) -> dict[str, Any]:
        return dict(self.to_body()["error"])


T_co = TypeVar("T_co", covariant=True)


class Answer(Protocol[T_co]):
    """A case-service reply, as a side effect reads it: its data, or the error it carries."""

    def data(self) -> T_co: ...


def reply_data(reply: Answer[T_co]) -> T_co:
    """A case-service reply's data inside a side effect: a refusal raises ``BusinessRefusal``
    (stored and replayed by the gateway); an outage (``Unavailable``) and a stale fence
    (``StaleFence``: the caller no longer holds its lock) pass as they are, nothing stored."""
    try:
        return reply.data()
    except (Unavailable, StaleFence):
        raise
    except OpsgateError as error:
        raise BusinessRefusal(error.message, code=error.code, **error.details) from error


class DirectSideEffectCall(OpsgateError):
    """A ``@side_effect`` function was called directly instead of through ``Gateway.invoke``."""

    code = "direct_side_effect_call"


@dataclass(frozen=True)
class Outcome:
    """What a finished call stored: the executor's result or its business refusal."""

    result: Any = None
    error: dict[str, Any] | None = None
    fence: int | None = None
    attempts: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result, "error": self.error, "fence": self.fence,
                "attempts": self.attempts}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        return cls(result=data.get("result"), error=data.get("error"),
                   fence=data.get("fence"), attempts=int(data.get("attempts") or 1))


def refusal(code: str, message: str, **details: Any) -> dict[str, Any]:
    """The ``error`` of a REFUSED envelope."""
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return error
