"""A completion after its lease was lost, on SQLite and PostgreSQL (and Redis in front): the
ledger records an unknown outcome with what the call returned, never the outcome as a fact;
the new owner's record stays theirs; nothing is replayed from it and nothing runs again."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import Engine, select

from core.db.tables import tool_call_ledger
from core.gateway import (
    CallStatus,
    Gateway,
    Ledger,
    LedgerState,
    RedisClaimStore,
    ToolCall,
    args_hash,
    call_key,
)
from core.gateway.ledger import LATE, Intent
from core.gateway.model import Outcome
from tests.support.clock import Clock, let_redis_time_pass


def intent(owner: str, *, lease_s: float = 0.5, idempotent: bool = True) -> Intent:
    call = ToolCall("exec.step", {"step": 1}, "executor", "case-1", business_key="plan:1:step:1")
    return Intent(key=call_key(call), call=call, args_hash=args_hash(call.args), owner=owner,
                  fence=None, idempotent=idempotent, lease_s=lease_s)


def test_the_owner_past_its_lease_records_an_unknown_outcome(engine: Engine) -> None:
    clock = Clock()
    ledger = Ledger(engine, clock=clock)
    first = intent("zombie", idempotent=False)
    assert ledger.claim(first).outcome == "claimed"
    clock.advance(0.6)  # past the 0.5 s lease; nobody took over
    returned = Outcome(result={"ok": False, "timed_out": True})
    assert ledger.complete(first.key, "zombie", returned, "plan:1:step:1") == "unknown"
    assert ledger.complete(first.key, "zombie", returned) == "unknown"  # a retry: the same
    entry = ledger.entry(first.key)
    assert entry is not None and entry.state == LedgerState.UNKNOWN_OUTCOME
    assert entry.result["returned"] == {"ok": False, "timed_out": True}
    assert entry.result["business_key"] == "plan:1:step:1"
    assert "lease ended" in entry.result["why"] and entry.error is None
    assert [e.key for e in ledger.unknown()] == [first.key]
    assert ledger.stuck() == []
    # nobody runs it again, nobody is told it happened
    assert ledger.claim(intent("later", idempotent=False)).outcome == "needs_reconciliation"


def test_a_late_completion_of_a_key_taken_over_keeps_both(engine: Engine) -> None:
    clock = Clock()
    ledger = Ledger(engine, clock=clock)
    assert ledger.claim(intent("zombie")).outcome == "claimed"
    clock.advance(0.6)
    assert ledger.claim(intent("new-owner", lease_s=10)).outcome == "claimed"
    key = intent("x").key
    assert ledger.complete(key, "new-owner", Outcome(result="new")) == "recorded"
    assert ledger.complete(key, "zombie", Outcome(result="late")) == "taken_over"
    assert ledger.complete(key, "zombie", Outcome(result="late")) == "taken_over"  # a retry
    entry = ledger.entry(key)
    assert entry is not None and (entry.state, entry.result) == ("done", "new")
    [late] = ledger.unknown()
    assert late.key == f"{key}{LATE}zombie" and late.tool == "exec.step"
    assert late.result["returned"] == "late" and "took the call over" in late.result["why"]


@pytest.mark.parametrize("store", ["ledger", "redis"])
def test_the_gateway_answers_unknown_and_never_replays_it(store: str, engine: Engine,
                                                           request: pytest.FixtureRequest) -> None:
    claims, clock = None, Clock()
    if store == "redis":
        claims = RedisClaimStore(request.getfixturevalue("redis_client"),
                                 request.getfixturevalue("redis_prefix"))
    gateway = Gateway(Ledger(engine, clock=clock), claims, lease_s=0.2)
    call = ToolCall("step.script.exec", {"argv": ["/bin/apply"]}, "executor", "case:1",
                    business_key="case-1:plan:1:0:1")
    started, wake, runs = threading.Event(), threading.Event(), []

    def frozen(_args: Mapping[str, Any]) -> Any:
        runs.append("run")
        started.set()
        assert wake.wait(10)
        return {"ok": False, "summary": "timed out", "timed_out": True}

    with ThreadPoolExecutor(1) as pool:
        late = pool.submit(gateway.run, call, frozen)
        assert started.wait(10)
        clock.advance(0.3)
        if claims is not None:
            let_redis_time_pass(claims.client, claims.prefix, 0.3)
        repeat = gateway.run(call, frozen)
        wake.set()
        zombie = late.result(10)
    assert repeat.error is not None and repeat.error["code"] == "needs_reconciliation"
    assert zombie.status is CallStatus.REFUSED and zombie.error is not None
    assert zombie.error["code"] == "unknown_outcome"
    assert zombie.result == {"ok": False, "summary": "timed out", "timed_out": True}
    again = gateway.run(call, frozen)  # Redis holds nothing to replay; the ledger refuses
    assert again.error is not None and again.error["code"] == "needs_reconciliation"
    assert runs == ["run"]
    with engine.connect() as conn:
        states = conn.execute(select(tool_call_ledger.c.state)).scalars().all()
    assert states == ["unknown_outcome"]


def test_an_idempotent_call_may_run_again_after_an_unknown_outcome(engine: Engine) -> None:
    clock = Clock()
    ledger = Ledger(engine, clock=clock)
    first: Intent = intent("zombie")
    assert ledger.claim(first).outcome == "claimed"
    clock.advance(0.6)
    assert ledger.complete(first.key, "zombie", Outcome(result="late")) == "unknown"
    again = ledger.claim(intent("next"))
    assert (again.outcome, again.attempts) == ("claimed", 2)
