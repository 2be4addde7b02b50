"""The documented replies of each endpoint for ``/openapi.json``: its data shape and the error
shape under every status it can answer with."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from core.api.schemas import ErrorReply

_MEANING = {
    400: "Missing or malformed Idempotency-Key, If-Match or X-Correlation-Id",
    401: "Missing, unknown or revoked bearer token (once the server has any token)",
    403: "The token's principal may not do this: a reader writing, a service or non-approver "
         "deciding at the gate, or gate_approved/gate_rejected sent as a transition",
    404: "Unknown case, plan template or endpoint",
    409: "The FSM has no such move from the case's status, or the case is not at the stage "
         "the endpoint acts on",
    412: "If-Match / expected_version or the fence token is stale",
    413: "Request body over 64 KiB",
    422: "Invalid body or parameter, a guard refused the move, a reused Idempotency-Key, or "
         "a request to run something besides the approved plan's next step (off_plan)",
    503: "The database is unreachable; safe to retry",
}


def documented(data: type[BaseModel], *statuses: int, ok: int = 200) -> dict[int | str, Any]:
    responses: dict[int | str, Any] = {ok: {"model": data}}
    for status in statuses:
        responses[status] = {"model": ErrorReply, "description": _MEANING[status]}
    return responses
