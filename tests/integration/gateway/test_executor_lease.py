"""The per-call gateway lease the executor asks for: a repeat arriving after the configured
lease but within the call's own lease finds the call running, never runs it a second time."""

from __future__ import annotations

import threading

import pytest

from core.gateway import CallStatus, ToolCall, build_gateway
from core.settings import Settings
from tests.support.clock import Clock


@pytest.mark.parametrize(("own_lease_s", "expected_runs"), [(30.0, 1), (None, 2)])
def test_a_call_lease_longer_than_the_configured_one_keeps_repeats_out(engine, own_lease_s,
                                                                       expected_runs):
    clock = Clock()
    gateway = build_gateway(Settings(redis_url=None, gateway_lease_s=0.2), engine, clock=clock)
    call = ToolCall("step.noop", {"note": "slow"}, actor="executor", session_id="case:1",
                    business_key="case-1:plan:1:0:1")
    runs: list[str] = []
    started, repeated = threading.Event(), threading.Event()

    def slow(_args):
        runs.append("run")
        started.set()
        if len(runs) == 1:  # the first run lasts until the repeat has been answered
            repeated.wait(10)
        return {"ok": True}

    first = threading.Thread(target=gateway.run, args=(call, slow),
                             kwargs={"lease_s": own_lease_s, "idempotent": True})
    first.start()
    assert started.wait(5)
    clock.advance(0.4)  # well past the configured 0.2 s lease, the first run still running
    repeat = gateway.run(call, slow, lease_s=own_lease_s, idempotent=True)
    repeated.set()
    first.join(10)

    assert len(runs) == expected_runs
    if own_lease_s is not None:
        assert repeat.status is CallStatus.IN_PROGRESS
        entry = gateway.ledger.entry(repeat.key)
        assert entry is not None and entry.state == "done"

