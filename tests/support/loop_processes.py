"""The closed loop run as processes (``tests/e2e/core/test_loop_processes.py`` and the chaos run of
``tests/chaos/core/test_loop_faults.py``): its planner, whose one step calls a counting server,
that server's answer, and the waits and counts that check a run."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, select, text

from core.api.statuses import reply_status
from core.bootstrap import App
from core.consumers.planner import case_opener
from core.consumers.runs import current_run
from core.db.tables import ops_case
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.messages import Topic
from core.messaging.consumer import Delivery
from tests.support.local_http import LocalServer, Reply, Seen

PROCESS_CONSUMERS = ("intake", "analyst", "gatekeeper", "executor", "verifier", "notifier",
                     "librarian")


FINAL = (CaseStatus.CLOSED, CaseStatus.PARKED)


def effect_plan(url: str, case_id: UUID) -> dict[str, Any]:
    """A low-risk plan (the gatekeeper approves it itself) whose one step POSTs to ``url``."""
    return {
        "title": "Tell the downstream service, once",
        "risk_score": 0.1,
        "steps": [{"action": "http.request",
                   "params": {"method": "POST", "url": url, "json": {"case_id": str(case_id)}},
                   "timeout_s": 10, "retry": 0}],
        "rollback": {"action": "noop", "params": {"note": "nothing to undo"}},
        "verify": {"checks": [{"metric": "http_5xx_ratio", "below": 0.01}]},
    }


class EffectPlanner:
    """The ``planner`` consumer of these runs: proposes ``effect_plan`` for the counting server."""

    name = "planner"
    topics: tuple[str, ...] = (Topic.PLAN_GENERATE,)

    def __init__(self, app: App, url: str) -> None:
        self.cases = app.cases
        self.url = url

    def handle(self, delivery: Delivery) -> None:
        run = current_run(self.cases, self.name, delivery.envelope.payload, CaseStatus.PLANNING)
        if run is None:
            return
        cmd = TransitionCase(run.case_id, CaseEvent.PLAN_READY, actor=self.name,
                             plan=effect_plan(self.url, run.case_id),
                             expected_version=run.version,
                             requester=case_opener(self.cases, run.case_id))
        reply = self.cases.transition(cmd, run.key, inbox_entry=delivery.inbox_entry)
        if reply_status(reply) not in (409, 412):
            reply.data()


def _effect(seen: Seen) -> Reply:
    return Reply(200, b'{"applied": true}', {"Content-Type": "application/json"})


def wait_until(done, timeout_s: float, what: str, every_s: float = 0.25) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f}s waiting {what}"
        time.sleep(every_s)


def statuses(engine: Engine, case_ids: list[UUID]) -> dict[UUID, str]:
    with engine.connect() as conn:
        rows = conn.execute(select(ops_case.c.id, ops_case.c.status)
                            .where(ops_case.c.id.in_(case_ids))).all()
    return {row.id: row.status for row in rows}


def undelivered(engine: Engine, topics_of: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Per consumer: messages of its topics its inbox has not recorded (lost, or in flight)."""
    missing = {}
    with engine.connect() as conn:
        for consumer, topics in topics_of.items():
            missing[consumer] = int(conn.execute(text(
                "select count(*) from outbox o where o.topic = any(:topics) and not exists "
                "(select 1 from inbox i where i.consumer = :consumer and i.message_id = o.id)"),
                {"topics": list(topics), "consumer": consumer}).scalar_one())
    return {consumer: count for consumer, count in missing.items() if count}


def requests_by_case(server: LocalServer) -> tuple[Counter[str], dict[str, list[str]]]:
    keys: Counter[str] = Counter()
    by_case: dict[str, list[str]] = defaultdict(list)
    for seen in list(server.seen):
        key = seen.headers.get("idempotency-key", "")
        keys[key] += 1
        by_case[json.loads(seen.body)["case_id"]].append(key)
    return keys, by_case
