"""A zombie executor (issue 23, point 3) on the real PostgreSQL and Redis: a consumer frozen past
its step's lease while the target applies the step; the command is redelivered, the second
executor finds the step unfinished and parks the case; then the zombie wakes and completes.
The ledger records the late completion as an unknown outcome (never done, never "timed out"),
the target applied once, reconcile lists the step for a person, and the thread names the target.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, select

from core.consumers.executor import Executor
from core.consumers.notifier import Notifier
from core.db.tables import outbox, tool_call_ledger
from core.domain.messages import Topic
from core.gateway import build_gateway
from core.messaging.consumer import ConsumerRunner
from core.messaging.envelope import Envelope
from core.ops.reconcile import Reconciler
from tests.support.clock import Clock, let_redis_time_pass
from tests.support.local_http import Reply, Seen, local_server
from tests.support.plan_runs import S, envelope_of, executing_case, make_app, plan_of, status
from tests.support.servers import REDIS_URL

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

WAIT_S = 10.0  # every wait below is bounded by this; none is expected to take it


def test_a_zombie_steps_late_completion_is_an_unknown_outcome_for_a_person(
        pg_engine: Engine, redis_client: redis.Redis, redis_prefix: str) -> None:
    applied, wake = threading.Event(), threading.Event()

    def apply(_seen: Seen) -> Reply:
        applied.set()  # the target applied the change; the caller now freezes
        wake.wait(WAIT_S)
        return Reply(200, b"applied")

    with local_server({"/apply": apply}) as target:
        url = target.url("/apply")
        clock = Clock()
        app = make_app(pg_engine, redis_url=REDIS_URL, gateway_key_prefix=redis_prefix,
                       http_allowlist=[target.url("/")])
        app.gateway = build_gateway(app.settings, pg_engine, clock=clock)
        plan = plan_of([{"action": "http.request", "timeout_s": 10, "retry": 0,
                         "params": {"method": "POST", "url": url, "json": {"replicas": 4}}}])
        case_id = executing_case(app, plan)
        command = envelope_of(pg_engine, case_id, Topic.EXEC_RUN)

        zombie = ConsumerRunner(pg_engine, Executor(app), sleep=lambda _s: None)
        woke: list[str] = []
        frozen = threading.Thread(target=lambda: woke.append(zombie.deliver(command)))
        frozen.start()
        assert applied.wait(WAIT_S)
        # The zombie stays frozen past the step's lease (30 s), in the ledger and in Redis.
        clock.advance(31)
        let_redis_time_pass(redis_client, redis_prefix, 31)
        redelivered = ConsumerRunner(pg_engine, Executor(app), sleep=lambda _s: None)
        assert redelivered.deliver(command) == "done"
        assert status(app, case_id) == S.PARKED  # the safety of today: parked, nothing rerun

        wake.set()  # the zombie wakes and completes its step late
        frozen.join(WAIT_S)
        assert not frozen.is_alive() and woke == ["done"]

    assert [seen.path for seen in target.seen] == ["/apply"]  # the target applied once
    assert status(app, case_id) == S.PARKED

    steps = _step_calls(pg_engine)
    assert [row["state"] for row in steps] == ["unknown_outcome"]  # not "done"
    kept = steps[0]["result"]
    assert kept["returned"]["ok"] is True and "200" in kept["returned"]["summary"]
    assert "lease ended" in kept["why"]

    report = Reconciler(pg_engine, outbox_bound_s=300).run()
    assert not report.clean
    [finding] = [f for f in report.findings if f.kind == "unknown_outcome"]
    assert finding.about["case"] == str(case_id)
    assert finding.about["step"] == "step 1 (http.request), attempt 1"
    assert finding.about["tool"] == "step.http.request"
    assert finding.about["target"] == f"the service behind POST {url}"
    assert "needs a person" in finding.advice and url in finding.advice
    as_json = json.loads(json.dumps(report.as_dict(), default=str))
    assert as_json["clean"] is False
    assert {"case": str(case_id), "step": "step 1 (http.request), attempt 1",
            "tool": "step.http.request", "target": f"the service behind POST {url}"}.items() \
        <= next(f["about"] for f in as_json["findings"] if f["kind"] == "unknown_outcome").items()

    timeline = app.cases.timeline(case_id)
    late = [row for row in timeline if row["event"] == "step_result"
            and (row["meta"].get("context") or {}).get("refused") == "unknown_outcome"]
    assert len(late) == 1 and f"check the service behind POST {url}" in late[0]["reason"]
    parked = [row for row in timeline if row["event"] == "exec_failed"]
    assert len(parked) == 1 and f"check the service behind POST {url}" in parked[0]["reason"]

    thread = _thread(app, case_id)
    assert any(text.startswith("✗ step 1 (http.request): outcome unknown — check the service "
                               f"behind POST {url}") for text in thread), thread
    assert any("PARKED" in text and url in text for text in thread), thread


def _step_calls(engine: Engine) -> list[Any]:
    query = select(tool_call_ledger).where(tool_call_ledger.c.tool.like("step.http%"))
    with engine.connect() as conn:
        return list(conn.execute(query).mappings())


def _thread(app: Any, case_id: Any) -> list[str]:
    """What the notifier posts in the case's thread for every fact in the outbox, in order."""
    notifier = ConsumerRunner(app.engine, Notifier(app), sleep=lambda _s: None)
    query = (select(outbox).where(outbox.c.key == str(case_id)).order_by(outbox.c.id))
    with app.engine.connect() as conn:
        rows = list(conn.execute(query).mappings())
    for row in rows:
        if row["topic"] in Notifier.topics:
            notifier.deliver(Envelope(int(row["id"]), row["topic"], row["key"],
                                      dict(row["payload"])))
    return list(app.chat.thread(str(case_id)))
