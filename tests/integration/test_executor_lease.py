"""The per-call gateway lease the executor asks for: a repeat arriving after the configured
lease but within the call's own lease finds the call running, never runs it a second time."""

from __future__ import annotations

import threading
import time

import pytest

from core.gateway import CallStatus, ToolCall, build_gateway
from core.settings import Settings


@pytest.mark.parametrize(("own_lease_s", "expected_runs"), [(30.0, 1), (None, 2)])
def test_a_call_lease_longer_than_the_configured_one_keeps_repeats_out(engine, own_lease_s,
                                                                       expected_runs):
    gateway = build_gateway(Settings(redis_url=None, gateway_lease_s=0.2), engine)
    call = ToolCall("step.noop", {"note": "slow"}, actor="executor", session_id="case:1",
                    business_key="case-1:plan:1:0:1")
    runs: list[str] = []
    started = threading.Event()

    def slow(_args):
        runs.append("run")
        started.set()
        time.sleep(0.8)  # well past the configured 0.2 s lease
        return {"ok": True}

    first = threading.Thread(target=gateway.run, args=(call, slow),
                             kwargs={"lease_s": own_lease_s, "idempotent": True})
    first.start()
    assert started.wait(5)
    time.sleep(0.4)
    repeat = gateway.run(call, slow, lease_s=own_lease_s, idempotent=True)
    first.join(10)

    assert len(runs) == expected_runs
    if own_lease_s is not None:
        assert repeat.status is CallStatus.IN_PROGRESS
        entry = gateway.ledger.entry(repeat.key)
        assert entry is not None and entry.state == "done"

