"""Calls of the REST API as the tests make them: fresh idempotency keys, a new principal's
bearer header, and the two reply shapes (``{"data": …}`` and the one error shape) checked as
they are read."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Engine, func, select

from core import principals


def new_key() -> str:
    return f"test-{uuid.uuid4().hex}"


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The response is ``status`` with the one error shape and ``code``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert set(error) <= {"code", "message", "details"}
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


def data(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"data"}
    return body["data"]


def rows(engine: Engine, table: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def bearer(engine: Engine, name: str = "lead", slack_user: str | None = "U0LEAD",
           role: principals.Role = "approver") -> dict[str, str]:
    """The Authorization header of a new principal (by default a person who approves)."""
    _, token = principals.create(engine, name, role, slack_user)
    return {"Authorization": f"Bearer {token}"}
