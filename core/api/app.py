"""Builds the REST API over one wired ``App``; no module-level app, so tests and ``opsgate
serve`` each build their own."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI

from core.allowed_hosts import allowed_hosts
from core.api import alerts, approvals, cases, changes, health, ops, plans
from core.api.deadlines import BoundedDatabaseWaits
from core.api.failures import install_error_handlers
from core.api.finite_json import FiniteJsonBody
from core.api.hosts import AllowedHostsOnly
from core.api.limits import MAX_BODY_BYTES, BodyLimit
from core.api.ops_correlation import CorrelationId
from core.api.walkthrough import routes as walkthrough
from core.bootstrap import App
from core.mcp.http import mount_mcp

DESCRIPTION = """The case service over HTTP. Every write needs an `Idempotency-Key` header.
Callers are principals named by their bearer token (`opsgate token create`, roles reader,
operator, approver; `OPSGATE_API_TOKEN` is the service `api-token`, an operator). Once the server
has any token, writes need an operator's and reads a reader's (unless `OPSGATE_API_READS=open`);
the timeline records the principal as the actor, and a body's `actor` only as the stated actor.
Plans are approved or rejected only through `POST /case/{id}/approve` and `/reject`, by an
approver linked to a person, under the same policy as Slack buttons. `POST /gate/eval`,
`/adapter/exec` and `/verify/run` run the loop's gatekeeper, executor and verifier on one case
now; the gate approves by itself only what the policy lets approve itself.
Replies are `{"data": …}`; errors are `{"error": {"code", "message", "details"?}}`."""


def create_api(app: App) -> FastAPI:
    """The FastAPI application serving ``app``'s case service."""
    api = FastAPI(title="opsgate", version=_version(), description=DESCRIPTION, redoc_url=None)
    install_error_handlers(api)
    api.add_middleware(BoundedDatabaseWaits)  # a silent PostgreSQL is a 503, never a hang
    api.add_middleware(FiniteJsonBody)  # inside BodyLimit: reads only a bounded body
    api.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES,
                       paths={alerts.PATH: alerts.ALERT_BODY})
    # Before any body is read: a name this server does not answer to (DNS rebinding) is 403.
    api.add_middleware(AllowedHostsOnly, hosts=allowed_hosts(app.settings))
    api.add_middleware(CorrelationId)  # outermost: even a refused body's reply names its id
    for routes in (cases.router, approvals.router, plans.router, walkthrough.router,
                   health.router, ops.router, alerts.router, changes.router):
        api.include_router(routes)
    api.state.opsgate = app  # what the endpoints' dependencies read (core.api.deps.opsgate)
    mount_mcp(app, api)  # the case tools over MCP's streamable HTTP at /mcp
    for mount in app.extensions.routes:  # what the outer layers serve (Slack events, …)
        mount(app, api)
    return api


def _version() -> str:
    try:
        return version("opsgate")
    except PackageNotFoundError:
        return "0+unknown"
