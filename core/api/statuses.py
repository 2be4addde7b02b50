"""HTTP statuses, the REST API's alone: the status each reply outcome and each error is sent
with."""

from __future__ import annotations

from core.cases.replies import Reply, ReplyOutcome
from core.errors import (
    BadRequest,
    Forbidden,
    IllegalTransition,
    InternalError,
    NotFound,
    OpsgateError,
    PayloadTooLarge,
    PreconditionFailed,
    Unauthorized,
    Unavailable,
    Unprocessable,
)
from core.mcp.remote import RemoteUnavailable

OUTCOME_STATUS: dict[ReplyOutcome, int] = {
    ReplyOutcome.DONE: 200,
    ReplyOutcome.CREATED: 201,
    ReplyOutcome.WAITING: 202,
}

# An error answers with the status of its nearest class here (VersionConflict: 412).
ERROR_STATUS: dict[type[OpsgateError], int] = {
    BadRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    IllegalTransition: 409,
    PreconditionFailed: 412,
    PayloadTooLarge: 413,
    Unprocessable: 422,
    InternalError: 500,
    OpsgateError: 500,  # DirectSideEffectCall, InvalidSettings, a code no class claims
    RemoteUnavailable: 502,
    Unavailable: 503,
}


def error_status(error: OpsgateError) -> int:
    return next(ERROR_STATUS[kind] for kind in type(error).__mro__ if kind in ERROR_STATUS)


def reply_status(reply: Reply[object]) -> int:
    """The status a service reply is sent with, first time and replayed alike."""
    return OUTCOME_STATUS[reply.outcome] if reply.error is None else error_status(reply.error)
