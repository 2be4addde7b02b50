"""``POST /alerts/alertmanager``: Prometheus Alertmanager's webhook (version 4), authenticated by
``Authorization: Bearer $OPSGATE_ALERT_TOKEN`` (refused while the token is unset). An alert group
has at most one open case; new and resolved alerts become notes on it, and a group that fires
after its case CLOSED opens its next case (``core.alerts``).

Alertmanager never retries a 4xx, so a notification is refused with one only when sending it
again could never help: a wrong token, a body that is not JSON or not the webhook's shape, or one
beyond the documented bound (``ALERT_BODY_BYTES``, ``MAX_ALERTS``). What its alerts say is
stored cut and cleaned instead; an outage answers 503 and Alertmanager sends it again. Every
error answered is counted in ``alert_notification_refused_total{reason}``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials
from starlette.exceptions import HTTPException

from core.alerts.intake import AlertIntake
from core.alerts.model import Notification
from core.api.deps import opsgate
from core.api.headers import bearer
from core.api.limits import Allowance
from core.api.replies import send_data
from core.errors import PayloadTooLarge, Unauthorized, Unavailable
from core.metrics import ALERT_REFUSALS

PATH = "/alerts/alertmanager"
# The bound of one notification (docs/operations.md): a group of 10,000 alerts with 1.6 KB
# descriptions is about 20 MB; beyond it, Alertmanager's max_alerts keeps a group within.
ALERT_BODY_BYTES = 32 * 1024 * 1024
MAX_ALERTS = 20_000
MAX_ALERTS_ADVICE = "set max_alerts in Alertmanager's webhook config"


def refused(reason: str) -> None:
    ALERT_REFUSALS.labels(reason=reason).inc()


# The API's body limit for this path: refusing a body over it counts as too_large.
ALERT_BODY = Allowance(ALERT_BODY_BYTES, MAX_ALERTS_ADVICE, lambda: refused("too_large"))


def refusal_reason(error: Exception) -> str:
    """The reason label of an error answered to Alertmanager."""
    if isinstance(error, Unauthorized):
        return "unauthorized"
    if isinstance(error, PayloadTooLarge):
        return "too_large"
    if isinstance(error, RequestValidationError):
        decoding = any(e.get("type") == "json_invalid" for e in error.errors())
        return "not_json" if decoding else "not_webhook"
    if isinstance(error, HTTPException) and error.status_code == 400:
        return "not_json"  # a body FastAPI could not read as text (not UTF-8)
    if isinstance(error, Unavailable):
        return "unavailable"
    return "internal"


class CountedRoute(APIRoute):
    """The route whose every error answer is counted with its reason."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def counted(request: Request) -> Response:
            try:
                return await handle(request)
            except Exception as error:
                refused(refusal_reason(error))
                raise

        return counted


router = APIRouter(tags=["alerts"], route_class=CountedRoute)


def admit_alert(request: Request,
                credentials: Annotated[HTTPAuthorizationCredentials | None,
                                       Depends(bearer)]) -> None:
    token = opsgate(request).settings.alert_token
    if token is None or not token.get_secret_value():
        raise Unauthorized("alert intake is off: the server has no OPSGATE_ALERT_TOKEN")
    given = b"" if credentials is None else credentials.credentials.encode("utf-8")
    if not hmac.compare_digest(given, token.get_secret_value().encode("utf-8")):
        raise Unauthorized("alerts need 'Authorization: Bearer <OPSGATE_ALERT_TOKEN>'")


@router.post(PATH, dependencies=[Depends(admit_alert)],
             responses={401: {"description": "Missing or wrong bearer token, or intake off"},
                        413: {"description": f"Over {ALERT_BODY_BYTES // 2**20} MiB or "
                                             f"{MAX_ALERTS:,} alerts"},
                        422: {"description": "Not an Alertmanager version 4 notification"},
                        503: {"description": "The database is unavailable: sent again"}})
def alertmanager(notification: Notification, request: Request) -> Response:
    """One notification: opens the group's case unless one is open, notes new and resolved
    alerts."""
    if len(notification.alerts) > MAX_ALERTS:
        raise PayloadTooLarge(f"the notification has {len(notification.alerts):,} alerts, over "
                              f"{MAX_ALERTS:,}: {MAX_ALERTS_ADVICE}", limit=MAX_ALERTS)
    app = opsgate(request)
    intake = AlertIntake(app.engine, app.cases).receive(notification)
    return send_data(intake.as_dict())
