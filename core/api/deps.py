"""The dependencies endpoints declare: the wired ``App`` and its case service, and the admission
of a write (bearer token, then Idempotency-Key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials

from core.api.headers import IdempotencyKeyHeader, bearer, check_bearer, check_idempotency_key
from core.bootstrap import App
from core.service import CaseService


def opsgate(request: Request) -> App:
    """The wired ``App`` the API was built over (``create_api`` puts it in the app state)."""
    app: App = request.app.state.opsgate
    return app


def case_service(request: Request) -> CaseService:
    return opsgate(request).cases


def admit_write(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    idempotency_key: IdempotencyKeyHeader = None,
) -> str:
    """Admit a write: the bearer token first (when the server has one), then the
    Idempotency-Key, which it returns."""
    token = opsgate(request).settings.api_token
    expected = b"" if token is None else token.get_secret_value().encode("utf-8")
    if expected:
        check_bearer(credentials, expected)
    return check_idempotency_key(idempotency_key)


Cases = Annotated[CaseService, Depends(case_service)]
WriteKey = Annotated[str, Depends(admit_write)]
