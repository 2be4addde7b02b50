"""Every failure the REST API answers, ours and the framework's, in the one error shape
``{"error": {"code", "message", "details"?}}``, rendered as canonical JSON like service replies."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from core.api.statuses import error_status
from core.domain.plans import canonical_json
from core.errors import InternalError, InvalidRequest, OpsgateError, Unauthorized

log = logging.getLogger(__name__)

JSON = "application/json"

# Statuses the framework itself raises (routing, methods); ours come as OpsgateError.
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> str:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return canonical_json({"error": error})


def error_response(error: OpsgateError) -> Response:
    if isinstance(error, InternalError):
        log.error("internal error: %s", error.message, exc_info=error)
        return _internal_error()
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, Unauthorized) else None
    return Response(canonical_json(error.to_body()), status_code=error_status(error),
                    media_type=JSON, headers=headers)


def invalid_request(exc: RequestValidationError) -> InvalidRequest:
    """Pydantic's findings as one readable line plus a list; the input itself is left out, as
    it may be large or secret."""
    problems = [
        {"loc": ".".join(str(part) for part in error.get("loc", ())),
         "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))}
        for error in exc.errors()
    ]
    first = problems[0] if problems else {"loc": "request", "msg": "invalid"}
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return InvalidRequest(f"invalid request: {first['loc']}: {first['msg']}{more}",
                          problems=problems)


async def _on_opsgate_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OpsgateError)
    return error_response(exc)


async def _on_invalid_request(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return error_response(invalid_request(exc))


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    if exc.status_code == 404:
        message = f"no endpoint {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return Response(error_body(code, message), status_code=exc.status_code, media_type=JSON,
                    headers=exc.headers)


async def _on_crash(_request: Request, _exc: Exception) -> Response:
    # The server still logs the traceback; the caller learns nothing internal.
    return _internal_error()


def _internal_error() -> Response:
    return Response(error_body("internal_error", "internal error"), status_code=500,
                    media_type=JSON)


def install_error_handlers(api: FastAPI) -> None:
    api.add_exception_handler(OpsgateError, _on_opsgate_error)
    api.add_exception_handler(RequestValidationError, _on_invalid_request)
    api.add_exception_handler(HTTPException, _on_http_error)
    api.add_exception_handler(Exception, _on_crash)
