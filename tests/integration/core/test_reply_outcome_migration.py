"""Migration 0012 on both databases: the idempotency store keeps each reply's outcome instead of
its HTTP status, and a reply stored before is replayed with the same status and the same bytes;
the downgrade gives every row back the status the API sent."""

from __future__ import annotations

from typing import Any

from alembic import command
from sqlalchemy import Engine, text

from core.api.statuses import reply_status
from core.cases.replies import Reply
from core.cases.service import CaseService
from core.domain.commands import OpenCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.migrate import alembic_config, current_revision, head_revision, upgrade_engine
from tests.support.cases import case_in, key
from tests.support.cases import command as transition


def downgrade(engine: Engine, revision: str) -> None:
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def requests(service: CaseService) -> list[Any]:
    """One request of each kind a reply can come to: created, done, moved on (an illegal move,
    a stale version) and refused (a guard)."""
    new, planning = case_in(service, CaseStatus.NEW), case_in(service, CaseStatus.PLANNING)
    return [
        lambda k: service.open_case(OpenCase(title="disk full on db-1", actor="pager"), k),
        lambda k: service.transition(transition(new, CaseEvent.START_ANALYSIS), k),
        lambda k: service.transition(transition(new, CaseEvent.EXEC_DONE), k),
        lambda k: service.transition(transition(new, CaseEvent.ANALYSIS_DONE,
                                                expected_version=0), k),
        lambda k: service.transition(transition(planning, CaseEvent.PLAN_READY,
                                                plan={"title": "incomplete"}), k),
    ]


def test_kept_replies_keep_their_status_and_bytes_across_0012(engine, service) -> None:
    sent: dict[str, tuple[Any, Reply]] = {}
    for request in requests(service):
        k = key()
        sent[k] = (request, request(k))
    assert sorted(reply_status(reply) for _, reply in sent.values()) == [200, 201, 409, 412, 422]

    downgrade(engine, "0011")
    with engine.connect() as conn:
        kept = dict(conn.execute(text("SELECT key, status FROM idempotency")).all())
    assert {k: kept[k] for k in sent} == {k: reply_status(reply) for k, (_, reply) in sent.items()}

    upgrade_engine(engine)
    assert current_revision(engine) == head_revision()
    for k, (request, first) in sent.items():
        again = request(k)
        assert again.replayed and again.body == first.body
        assert (again.outcome, reply_status(again)) == (first.outcome, reply_status(first))
