"""``GET /healthz``: answers 200 while the database answers, 503 otherwise."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from core.api.deps import opsgate
from core.api.openapi import documented
from core.api.replies import send_data
from core.api.schemas import HealthReply
from core.errors import Unavailable

router = APIRouter(tags=["health"])


@router.get("/healthz", responses=documented(HealthReply, 503))
def healthz(request: Request) -> Response:
    """Whether this process can reach its database."""
    engine = opsgate(request).engine
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        raise Unavailable("the database is unreachable") from exc
    return send_data({"status": "ok", "database": engine.dialect.name})
