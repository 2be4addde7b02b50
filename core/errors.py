"""The one error hierarchy of opsgate; each error carries a stable ``code`` and an HTTP status.

    OpsgateError
    ├── BadRequest (400)          missing Idempotency-Key, malformed input
    ├── Unauthorized (401)        missing, unknown or revoked bearer token
    ├── Forbidden (403)           a known caller whose role does not allow this (REST API)
    ├── NotFound (404)            unknown case, unknown plan
    ├── IllegalTransition (409)   the FSM has no such move from the current status
    ├── PreconditionFailed (412)
    │   ├── VersionConflict       expected_version / If-Match does not match
    │   └── StaleFence            a fence token lower than the highest issued for the session
    ├── PayloadTooLarge (413)     a request body over the API's size limit
    ├── Unprocessable (422)
    │   ├── GuardFailed           the FSM allows the move but a guard refused it
    │   │   ├── ApprovalRefused   the approver may not decide this plan (policy)
    │   │   └── StalePlan         the approval names a plan the case no longer waits on
    │   ├── KeyReuse              an idempotency key sent again with a different request
    │   ├── InvalidPlan           a ChangePlan that fails its JSON Schema
    │   └── InvalidRequest        a request body or parameter of the wrong shape (REST API)
    └── Unavailable (503)         a dependency (database, Redis) is unreachable: safe to retry

Third-party exceptions are translated at the boundary (``raise Unavailable(...) from exc``).
"""

from __future__ import annotations

from typing import Any, ClassVar


class OpsgateError(Exception):
    """Base of every error opsgate raises on purpose."""

    code: ClassVar[str] = "error"
    status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_body(self) -> dict[str, Any]:
        """The error as the REST API and the idempotency store render it."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}


class BadRequest(OpsgateError):
    code = "bad_request"
    status = 400


class Unauthorized(OpsgateError):
    code = "unauthorized"
    status = 401


class Forbidden(OpsgateError):
    code = "forbidden"
    status = 403


class NotFound(OpsgateError):
    code = "not_found"
    status = 404


class IllegalTransition(OpsgateError):
    code = "illegal_transition"
    status = 409


class PreconditionFailed(OpsgateError):
    code = "precondition_failed"
    status = 412


class VersionConflict(PreconditionFailed):
    code = "version_conflict"


class StaleFence(PreconditionFailed):
    code = "stale_fence"


class Unprocessable(OpsgateError):
    code = "unprocessable"
    status = 422


class GuardFailed(Unprocessable):
    code = "guard_failed"


class ApprovalRefused(GuardFailed):
    code = "approval_refused"


class StalePlan(GuardFailed):
    code = "stale_plan"


class KeyReuse(Unprocessable):
    code = "idempotency_key_reused"


class InvalidPlan(Unprocessable):
    code = "invalid_plan"


class InvalidRequest(Unprocessable):
    code = "invalid_request"


class PayloadTooLarge(OpsgateError):
    code = "payload_too_large"
    status = 413


class Unavailable(OpsgateError):
    code = "unavailable"
    status = 503


_BY_CODE: dict[str, type[OpsgateError]] = {
    cls.code: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        IllegalTransition,
        PreconditionFailed,
        VersionConflict,
        StaleFence,
        Unprocessable,
        GuardFailed,
        ApprovalRefused,
        StalePlan,
        KeyReuse,
        InvalidPlan,
        InvalidRequest,
        PayloadTooLarge,
        Unavailable,
    )
}


def error_from_body(body: dict[str, Any]) -> OpsgateError:
    """Rebuild the error a stored or received ``{"error": {...}}`` body describes."""
    error = body.get("error", {})
    cls = _BY_CODE.get(str(error.get("code")), OpsgateError)
    return cls(str(error.get("message", "")), **dict(error.get("details") or {}))
