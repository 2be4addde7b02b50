"""An idempotent reply keeps its outcome (``done``, ``created``, ``moved_on``, ``refused``)
instead of an HTTP status: the case service no longer speaks HTTP, and the REST API derives the
status from the outcome and the error code in the kept body, the same status as before.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_OUTCOME_OF_STATUS = sa.text(
    "UPDATE idempotency SET outcome = CASE WHEN status = 201 THEN 'created' "
    "WHEN status < 400 THEN 'done' WHEN status IN (409, 412) THEN 'moved_on' "
    "ELSE 'refused' END")

# The statuses the API sent at this revision, for a downgrade (the body names the error).
_STATUS_OF_CODE = {
    "bad_request": 400, "unauthorized": 401, "forbidden": 403, "not_found": 404,
    "illegal_transition": 409, "precondition_failed": 412, "version_conflict": 412,
    "stale_fence": 412, "payload_too_large": 413, "unavailable": 503,
    **dict.fromkeys(("unprocessable", "guard_failed", "approval_refused", "stale_plan",
                     "idempotency_key_reused", "invalid_plan", "invalid_request", "off_plan"),
                    422),
}
_STATUS_OF_OUTCOME = {"done": 200, "created": 201, "waiting": 202}


def upgrade() -> None:
    with op.batch_alter_table("idempotency") as batch:
        batch.add_column(sa.Column("outcome", sa.String(16), nullable=True))
    op.execute(_OUTCOME_OF_STATUS)
    with op.batch_alter_table("idempotency") as batch:
        batch.alter_column("outcome", existing_type=sa.String(16), nullable=False)
        batch.drop_column("status")


def downgrade() -> None:
    with op.batch_alter_table("idempotency") as batch:
        batch.add_column(sa.Column("status", sa.SmallInteger(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT key, outcome, body FROM idempotency")).all()
    for key, outcome, body in rows:
        conn.execute(sa.text("UPDATE idempotency SET status = :status WHERE key = :key"),
                     {"status": _status(outcome, body), "key": key})
    with op.batch_alter_table("idempotency") as batch:
        batch.alter_column("status", existing_type=sa.SmallInteger(), nullable=False)
        batch.drop_column("outcome")


def _status(outcome: str, body: str) -> int:
    if outcome in _STATUS_OF_OUTCOME:
        return _STATUS_OF_OUTCOME[outcome]
    code = str(json.loads(body).get("error", {}).get("code"))
    return _STATUS_OF_CODE.get(code, 500)
