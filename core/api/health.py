"""``GET /healthz``: the process is up (liveness; no dependency contacted). ``GET /readyz``:
database, Redis (when configured) and bus reachable and the relay keeping up; 503 otherwise;
``degraded`` when the configuration leaves a capability out (each such check has a warning)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from core.api.deps import opsgate
from core.api.openapi import documented
from core.api.replies import send_data
from core.api.schemas import HealthReply
from core.domain.plans import canonical_json
from core.ops.readiness import readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", responses=documented(HealthReply))
def healthz(request: Request) -> Response:
    """The process is up and serving; says which database it is configured for."""
    return send_data({"status": "ok", "database": opsgate(request).engine.dialect.name})


@router.get("/readyz", responses={
    200: {"description": "Ready: every check is ok (degraded: some carry a warning, a "
                         "capability the configuration leaves out)"},
    503: {"description": "Not ready: a dependency is unreachable or the relay lags"}})
def readyz(request: Request) -> Response:
    """Whether this process should get traffic, with each check's finding."""
    report: dict[str, Any] = readiness(opsgate(request))
    status = 200 if report["status"] == "ready" else 503
    return Response(canonical_json({"data": report}), status_code=status,
                    media_type="application/json")
