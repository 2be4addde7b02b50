"""The dependencies endpoints declare: the wired ``App`` and its case service, and who may do
what: a read (any principal, or nobody while reads are open), a write (an operator, then the
Idempotency-Key) and a decision at the gate (an approver who is a person). A principal scoped
to channels reads and writes only those channels' cases (``in_scope``): any other is 404, as an
unknown case."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from uuid import UUID

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials

from core.api.headers import IdempotencyKeyHeader, bearer, check_idempotency_key
from core.bootstrap import App
from core.cases.service import CaseService
from core.errors import Forbidden, Unauthorized
from core.principals import (
    ANONYMOUS,
    OPEN_READER,
    Principal,
    authenticate,
    tokens_configured,
)

Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


@dataclass(frozen=True)
class Write:
    """An admitted write: its Idempotency-Key and the principal it is made as."""

    key: str
    principal: Principal

    @property
    def actor(self) -> str:
        return self.principal.actor

    def attribution(self, stated_actor: str | None = None) -> dict[str, str]:
        return self.principal.attribution(stated_actor)


def opsgate(request: Request) -> App:
    """The wired ``App`` the API was built over (``create_api`` puts it in the app state)."""
    app: App = request.app.state.opsgate
    return app


def case_service(request: Request) -> CaseService:
    return opsgate(request).cases


def caller(request: Request, credentials: HTTPAuthorizationCredentials | None
           ) -> Principal | None:
    """Whose bearer token this is (401 when unknown or revoked); ``ANONYMOUS`` when the server
    has no token at all; None when it has some but the request sent none."""
    app = opsgate(request)
    api_token = None if app.settings.api_token is None else \
        app.settings.api_token.get_secret_value()
    if credentials is not None:
        principal = authenticate(app.engine, credentials.credentials, api_token)
        if principal is None:
            raise Unauthorized("this bearer token is unknown or revoked")
        return principal
    return None if tokens_configured(app.engine, api_token) else ANONYMOUS


def admit_read(request: Request, credentials: Credentials) -> Principal:
    """Who reads: a principal (any role) once the server has a token, unless
    OPSGATE_API_READS=open (then a caller without one is ``OPEN_READER``)."""
    if credentials is None and opsgate(request).settings.api_reads == "open":
        return OPEN_READER
    principal = caller(request, credentials)
    if principal is None:
        raise Unauthorized("reads need 'Authorization: Bearer <token>' (a reader or above)")
    return principal


def in_scope(cases: CaseService, principal: Principal, case_id: UUID) -> None:
    """Nothing when ``principal`` may see the case; ``NotFound``, as for an unknown case, when
    it lies outside the principal's channels."""
    if principal.channels is not None:
        cases.get_case(case_id, channels=principal.channels)


def admit_write(request: Request, credentials: Credentials,
                idempotency_key: IdempotencyKeyHeader = None) -> Write:
    """A write: an operator's (or approver's) token, then the Idempotency-Key."""
    principal = _writer(request, credentials)
    return Write(check_idempotency_key(idempotency_key), principal)


def admit_decision(request: Request, credentials: Credentials,
                   idempotency_key: IdempotencyKeyHeader = None) -> Write:
    """An approval or rejection: only an approver that is a person (linked to Slack) decides,
    never a service token, whatever its role."""
    principal = _writer(request, credentials)
    if not principal.decides_at_the_gate:
        why = ("is a service, and only people approve or reject" if principal.kind == "service"
               else f"is a {principal.role}, not an approver")
        raise Forbidden(f"{principal.name} {why}", principal=principal.name,
                        role=principal.role, kind=principal.kind)
    return Write(check_idempotency_key(idempotency_key), principal)


def _writer(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    principal = caller(request, credentials)
    if principal is None:
        raise Unauthorized("this write needs 'Authorization: Bearer <token>'")
    if not principal.may("operator"):
        raise Forbidden(f"{principal.name} is a {principal.role}: writes need an operator or "
                        "approver", principal=principal.name, role=principal.role)
    return principal


Cases = Annotated[CaseService, Depends(case_service)]
Writer = Annotated[Write, Depends(admit_write)]
Decider = Annotated[Write, Depends(admit_decision)]
Reader = Annotated[Principal, Depends(admit_read)]
