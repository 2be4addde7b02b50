"""``POST /changes``: deploys and configuration changes from CI, Argo CD or GitHub, each recorded
once by its change id (``core.changes``); ``GET /changes``: the recent ones of a component or a
service, for operators.

A delivery is authenticated by ``Authorization: Bearer $OPSGATE_CHANGES_TOKEN``, or, for GitHub
(which sends no header of ours), by ``X-Hub-Signature-256``: the body's HMAC-SHA256 under the
same token, set as the webhook's secret. The token unset refuses every delivery (401). The format
is GitHub's with ``X-GitHub-Event``, Argo CD's with ``X-Opsgate-Source: argocd`` or the shape of
the documented template, else the generic JSON. 201: recorded; 200: a retry of a recorded change
(the same reply); 202: not a change to record (a GitHub status other than success); 422: the body
cannot be read, or its id was recorded with other content. The body is bounded by the API's
64 KiB.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from core.api.deps import Credentials, Reader, opsgate
from core.api.replies import send_data
from core.api.schemas import ChangeListReply, ChangeReply, ErrorReply
from core.changes.formats import TARGET_PATTERN, VALUE_MAX, NotRecorded
from core.changes.intake import ChangeIntake
from core.changes.store import MAX_LIMIT, ChangeStore
from core.db.case_store import as_utc
from core.errors import BadRequest, Forbidden, InvalidRequest, Unauthorized

PATH = "/changes"
SIGNATURE = "X-Hub-Signature-256"
DEFAULT_WINDOW = timedelta(hours=24)

router = APIRouter(tags=["changes"])


async def raw_body(request: Request) -> bytes:
    """The body as sent: GitHub's signature is over these bytes."""
    return await request.body()


Body = Annotated[bytes, Depends(raw_body)]


def admit_change(request: Request, credentials: Credentials, body: Body) -> None:
    """The changes token as a bearer token, or (GitHub) as the key of the body's signature."""
    token = opsgate(request).settings.changes_token
    secret = b"" if token is None else token.get_secret_value().encode("utf-8")
    if not secret:
        raise Unauthorized("change intake is off: the server has no OPSGATE_CHANGES_TOKEN")
    if credentials is not None:
        if hmac.compare_digest(credentials.credentials.encode("utf-8"), secret):
            return
        raise Unauthorized("this bearer token is not OPSGATE_CHANGES_TOKEN")
    signature = request.headers.get(SIGNATURE)
    if signature is not None and "X-GitHub-Event" in request.headers:
        expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        if hmac.compare_digest(signature.encode("utf-8"), expected.encode("utf-8")):
            return
        raise Unauthorized(f"the {SIGNATURE} does not sign this body with "
                           "OPSGATE_CHANGES_TOKEN: make it the webhook's secret")
    raise Unauthorized("changes need 'Authorization: Bearer <OPSGATE_CHANGES_TOKEN>' (GitHub: "
                       "OPSGATE_CHANGES_TOKEN as the webhook's secret)")


_ERRORS = {401: "Missing or wrong bearer token or GitHub signature, or intake off",
           413: "Over 64 KiB",
           422: "Not a change in its format (every problem named), or a change id recorded "
                "before with other content (change_id_reused)",
           503: "The database is unavailable: send it again"}
_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "description": "The generic change {id, service, kind: deploy|config, "
    "version, summary, actor, at, namespace?, url?, target?, before?, after?}, Argo CD's "
    "notification (docs/operations.md; target? and previousRevision? too) or GitHub's "
    "deployment_status event (its deployment's payload may carry target, before and after)",
    "properties": {
        "target": {"type": "string", "pattern": TARGET_PATTERN,
                   "description": "The object the change changed: deployment/NAME, "
                                  "configmap/NAME, flag/KEY, hpa/NAME or route/NAME"},
        "before": {"description": f"Its value before: any JSON value, at most {VALUE_MAX} "
                                  "characters as compact JSON"},
        "after": {"description": "Its value after, likewise"}}}}}}}


@router.post(PATH, dependencies=[Depends(admit_change)], status_code=201,
             openapi_extra=_BODY,
             responses={201: {"model": ChangeReply, "description": "Recorded"},
                        200: {"model": ChangeReply,
                              "description": "A retry: the change as first recorded"},
                        202: {"description": "Not a change to record, and why"},
                        **{status: {"model": ErrorReply, "description": meaning}
                           for status, meaning in _ERRORS.items()}})
def receive_change(request: Request, body: Body) -> Response:
    """One delivery: recorded once by its change id (201), a retry answered with the same (200),
    a body that is no change answered 202 with the reason."""
    app = opsgate(request)
    intake = ChangeIntake(ChangeStore(app.engine), app.catalog.current, app.cases.clock)
    outcome = intake.receive(body, github_event=request.headers.get("X-GitHub-Event"),
                             declared=request.headers.get("X-Opsgate-Source"))
    if isinstance(outcome, NotRecorded):
        response = send_data({"recorded": False, "reason": outcome.reason})
        response.status_code = 202
        return response
    response = send_data(outcome.change.as_dict())
    response.status_code = 201 if outcome.created else 200
    return response


@router.get(PATH, responses={200: {"model": ChangeListReply,
                                   "description": "The changes, newest first"},
                             400: {"model": ErrorReply,
                                   "description": "A window outside UTC's years 1 to 9999, or "
                                   "since after until (the field named)"},
                             401: {"model": ErrorReply, "description": _ERRORS[401]},
                             403: {"model": ErrorReply,
                                   "description": "A token scoped to channels"},
                             422: {"model": ErrorReply,
                                   "description": "No component or service named"}})
def recent_changes(request: Request, reader: Reader,
                   component: Annotated[list[str] | None, Query()] = None,
                   service: Annotated[list[str] | None, Query()] = None,
                   since: datetime | None = None, until: datetime | None = None,
                   limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 20) -> Response:
    """The changes of these components or services in ``[since, until]`` (default: the last
    24 hours), newest first."""
    if reader.channels is not None:
        raise Forbidden(f"{reader.name} is scoped to channels; changes belong to no channel",
                        principal=reader.name)
    if not component and not service:
        raise InvalidRequest("name a component or a service: GET /changes?component=NAME")
    app = opsgate(request)
    start, end = window(since, until, app.cases.clock())
    changes = ChangeStore(app.engine).recent(component or [], service or [], start,
                                            end, limit)
    return send_data({"changes": [change.as_dict() for change in changes]})


def window(since: datetime | None, until: datetime | None,
           now: datetime) -> tuple[datetime, datetime]:
    """``[since, until]`` in UTC, ``until`` now and ``since`` 24 hours before it by default;
    ``BadRequest`` naming the field when a moment has no UTC date (before year 1 or after
    9999 once moved to UTC, or 24 hours before year 1) or ``since`` is after ``until``."""
    end = now if until is None else _in_utc(until, "until")
    if since is not None:
        start = _in_utc(since, "since")
    elif end - datetime.min.replace(tzinfo=UTC) < DEFAULT_WINDOW:
        raise BadRequest(f"until={end.isoformat()}: the 24 hours before it begin before year 1; "
                         "name since too", field="until")
    else:
        start = end - DEFAULT_WINDOW
    if start > end:
        raise BadRequest(f"since={start.isoformat()} is after until={end.isoformat()}",
                         field="since")
    return start, end


def _in_utc(moment: datetime, field: str) -> datetime:
    try:
        return as_utc(moment).astimezone(UTC)
    except OverflowError:
        raise BadRequest(f"{field}={moment.isoformat()}: not a moment in UTC's years 1 to 9999",
                         field=field) from None
