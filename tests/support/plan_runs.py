"""Helpers of the executor and verifier tests: an app on the test's database, a case brought to
EXECUTING with a given plan, the real cmd.* outbox rows as envelopes, a counting script."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, select

from core.bootstrap import App, bootstrap
from core.db.tables import outbox
from core.domain.commands import ApprovePlan
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plans import plan_hash
from core.messaging.envelope import Envelope
from core.settings import Settings
from tests.support.cases import APPROVER, APPROVERS, command, key, open_case
from tests.support.metrics import with_stand_in

E, S = CaseEvent, CaseStatus

# Appends its first argument to the file named by the second, then exits with the third: each
# run leaves one line, so a test counts runs by counting lines.
COUNTING_SCRIPT = '#!/bin/sh\necho "$1" >> "$2"\nexit "${3:-0}"\n'


def make_app(engine: Engine, **settings: Any) -> App:
    """The composition root on ``engine``; Redis only when the test passes ``redis_url``."""
    values: dict[str, Any] = {"redis_url": None, "prometheus_url": None,
                              "approvers": sorted(APPROVERS), **settings}
    return bootstrap(Settings(**with_stand_in(values)), engine=engine)


def counting_script(folder: Path) -> Path:
    path = folder / "count-run.sh"
    path.write_text(COUNTING_SCRIPT)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def runs(path: Path) -> list[str]:
    """The lines a counting script left: one per run."""
    return path.read_text().splitlines() if path.exists() else []


def script_step(script: Path, label: str, counter: Path, exit_code: int = 0,
                retry: int = 0) -> dict[str, Any]:
    return {"action": "script.exec", "timeout_s": 10, "retry": retry,
            "params": {"argv": [str(script), label, str(counter), str(exit_code)]}}


def plan_of(steps: list[dict[str, Any]], rollback: Any = None,
            verify: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"title": "Restart checkout", "risk_score": 0.2, "steps": steps,
            "rollback": {"action": "noop"} if rollback is None else rollback,
            "verify": verify or {"metric": "error_rate", "below": 0.01}}


def executing_case(app: App, plan: dict[str, Any]) -> UUID:
    """A case in EXECUTING with ``plan`` approved (its cmd.exec.run is in the outbox)."""
    case_id = open_case(app.cases)
    for event in (E.START_ANALYSIS, E.ANALYSIS_DONE):
        assert app.cases.transition(command(case_id, event), key()).ok
    return approve(app, case_id, plan)


def approve(app: App, case_id: UUID, plan: dict[str, Any]) -> UUID:
    """From PLANNING: propose ``plan`` and have it approved."""
    reply = app.cases.transition(command(case_id, E.PLAN_READY, plan=plan), key())
    assert reply.ok, reply.body
    # one approver who is not the requester satisfies the default policy (risk below 0.7)
    reply = app.cases.approve_plan(ApprovePlan(case_id, plan_hash(plan), approver=APPROVER),
                                   key())
    assert reply.ok, reply.body
    assert app.cases.get_case(case_id)["status"] == S.EXECUTING
    return case_id


def envelope_of(engine: Engine, case_id: UUID, topic: str) -> Envelope:
    """The case's latest outbox row of ``topic``, as the relay would deliver it."""
    query = (select(outbox).where(outbox.c.topic == topic, outbox.c.key == str(case_id))
             .order_by(outbox.c.id.desc()).limit(1))
    with engine.connect() as conn:
        row = conn.execute(query).mappings().one()
    return Envelope(int(row["id"]), row["topic"], row["key"], dict(row["payload"]))


def fresh_copy(envelope: Envelope, offset: int = 1_000_000) -> Envelope:
    """The same command under another message id (e.g. published again as a new row)."""
    return Envelope(envelope.message_id + offset, envelope.topic, envelope.key,
                    dict(envelope.payload))


def notes(app: App, case_id: UUID, event: str) -> list[dict[str, Any]]:
    """The case's timeline notes of ``event``, with their context (what the writer noted)."""
    return [{**row, "context": row["meta"].get("context", {})}
            for row in app.cases.timeline(case_id) if row["event"] == event]


def status(app: App, case_id: UUID) -> str:
    return str(app.cases.get_case(case_id)["status"])
