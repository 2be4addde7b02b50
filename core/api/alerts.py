"""``POST /alerts/alertmanager``: Prometheus Alertmanager's webhook (version 4), authenticated by
``Authorization: Bearer $OPSGATE_ALERT_TOKEN`` (refused while the token is unset). An alert group
has at most one open case; new and resolved alerts become notes on it, and a group that fires
after its case CLOSED opens its next case (``core.ops.alerts``)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials

from core.api.deps import opsgate
from core.api.headers import bearer
from core.api.replies import send_data
from core.errors import Unauthorized
from core.ops.alerts import AlertIntake, Notification

router = APIRouter(tags=["alerts"])


def admit_alert(request: Request,
                credentials: Annotated[HTTPAuthorizationCredentials | None,
                                       Depends(bearer)]) -> None:
    token = opsgate(request).settings.alert_token
    if token is None or not token.get_secret_value():
        raise Unauthorized("alert intake is off: the server has no OPSGATE_ALERT_TOKEN")
    given = b"" if credentials is None else credentials.credentials.encode("utf-8")
    if not hmac.compare_digest(given, token.get_secret_value().encode("utf-8")):
        raise Unauthorized("alerts need 'Authorization: Bearer <OPSGATE_ALERT_TOKEN>'")


@router.post("/alerts/alertmanager", dependencies=[Depends(admit_alert)],
             responses={401: {"description": "Missing or wrong bearer token, or intake off"},
                        422: {"description": "Not an Alertmanager version 4 notification"}})
def alertmanager(notification: Notification, request: Request) -> Response:
    """One notification: opens the group's case unless one is open, notes new and resolved
    alerts."""
    app = opsgate(request)
    intake = AlertIntake(app.engine, app.cases).receive(notification)
    return send_data(intake.as_dict())
