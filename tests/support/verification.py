"""A case at verification and the relay that runs its readings, on the verifier's clock (the
verifier's tests, ``tests/integration/consumers/test_verifier.py``, and the bounded PromQL of
``tests/integration/evidence/test_promql_bounds.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from core.consumers.executor import Executor
from core.consumers.verifier import Verifier
from core.db.case_store import as_utc
from core.db.tables import outbox
from core.domain.messages import Topic
from core.messaging.bus import InProcessBus
from core.messaging.consumer import ConsumerRunner
from core.messaging.relay import OutboxRelay
from tests.support.clock import Clock
from tests.support.plan_runs import S, envelope_of, executing_case, plan_of, status

NOOP = [{"action": "noop", "params": {}, "timeout_s": 10, "retry": 0}]


def verifying_case(app, verify: dict[str, Any]):
    """A case whose plan ran (one noop step): VERIFYING, its cmd.verify.run in the outbox."""
    case_id = executing_case(app, plan_of(NOOP, verify=verify))
    executor = ConsumerRunner(app.engine, Executor(app), sleep=lambda _s: None)
    assert executor.deliver(envelope_of(app.engine, case_id, Topic.EXEC_RUN)) == "done"
    assert status(app, case_id) == S.VERIFYING
    return case_id


def changed_at(app, case_id) -> datetime:
    """When the change finished: the case entered VERIFYING."""
    return as_utc(datetime.fromisoformat(app.cases.get_case(case_id)["updated_at"]))


class Loop:
    """The relay on the verifier's clock, delivering cmd.verify.run to one verifier."""

    def __init__(self, app, verifier: Verifier, clock: Clock) -> None:
        self.app, self.clock = app, clock
        bus = InProcessBus()
        bus.subscribe(Verifier.topics, ConsumerRunner(app.engine, verifier,
                                                      sleep=lambda _s: None))
        self.relay = OutboxRelay(app.engine, bus, clock=clock)

    def until_settled(self, case_id, limit: int = 50) -> int:
        """Run readings, the clock jumping to each scheduled one, until the case leaves
        VERIFYING; returns how many times the clock moved."""
        moves = 0
        self.relay.drain()
        while status(self.app, case_id) == S.VERIFYING:
            assert moves < limit, "the verification never concluded"
            self.clock.now = next_reading_at(self.app.engine, case_id)
            moves += 1
            self.relay.drain()
        return moves


def next_reading_at(engine, case_id) -> datetime:
    query = (select(outbox.c.deliver_after)
             .where(outbox.c.key == str(case_id), outbox.c.topic == Topic.VERIFY_RUN,
                    outbox.c.published_at.is_(None), outbox.c.deliver_after.is_not(None)))
    with engine.connect() as conn:
        [when] = conn.execute(query).scalars().all()
    return as_utc(when)
