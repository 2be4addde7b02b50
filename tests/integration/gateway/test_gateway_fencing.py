"""Leases, owners and fences: a zombie past its lease cannot overwrite or delete the new
owner's record (Redis and ledger), and its writes with the old fence are refused."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY
from sqlalchemy import Engine, func, select

from core.api.statuses import reply_status
from core.cases.service import CaseService
from core.db.tables import case_timeline, idempotency, outbox
from core.domain.commands import Fence, OpenCase, TransitionCase
from core.domain.fsm import CaseEvent
from core.errors import Unavailable
from core.gateway import (
    CallStatus,
    Gateway,
    Ledger,
    LedgerState,
    RedisClaimStore,
    RedisSessionLock,
    SessionLease,
    SessionLock,
    SqlSessionLock,
    ToolCall,
    args_hash,
    call_key,
    holding,
)
from core.gateway.ledger import Intent
from tests.support.clock import Clock, let_redis_time_pass


def intent(owner: str, *, lease_s: float = 0.5, idempotent: bool = True,
           fence: int | None = None) -> Intent:
    call = ToolCall("exec.step", {"step": 1}, "executor", "case-1", business_key="plan:1:step:1")
    return Intent(key=call_key(call), call=call, args_hash=args_hash(call.args), owner=owner,
                  fence=fence, idempotent=idempotent, lease_s=lease_s)


# -- the Redis claim store ----------------------------------------------------------------

def test_redis_a_zombie_cannot_complete_or_release_the_new_owners_claim(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    store = RedisClaimStore(redis_client, redis_prefix)
    assert store.claim_or_replay("k", "h", "zombie", 100).outcome == "claimed"
    let_redis_time_pass(redis_client, redis_prefix, 0.15)
    assert store.claim_or_replay("k", "h", "new-owner", 10_000).outcome == "claimed"
    assert store.complete("k", "zombie", '{"result": "zombie"}', 60) is False
    assert store.release("k", "zombie") is False
    assert redis_client.hget(f"{redis_prefix}k", "owner") == b"new-owner"
    assert store.claim_or_replay("k", "h", "third", 10_000).outcome == "in_progress"
    assert store.complete("k", "new-owner", '{"result": "new"}', 60) is True
    assert store.release("k", "new-owner") is False  # a finished record is never released
    assert store.claim_or_replay("k", "h", "third", 10_000) == ("replay", '{"result": "new"}')


def test_redis_a_retried_claim_recognises_its_own_owner_token(
        redis_client: redis.Redis, redis_prefix: str) -> None:
    store = RedisClaimStore(redis_client, redis_prefix)
    assert store.claim_or_replay("k", "h", "me", 10_000).outcome == "claimed"
    assert store.claim_or_replay("k", "h", "me", 10_000).outcome == "mine"
    assert store.claim_or_replay("k", "h", "someone", 10_000).outcome == "in_progress"
    assert store.claim_or_replay("k", "other-args", "me", 10_000).outcome == "mismatch"
    assert redis_client.pttl(f"{redis_prefix}k") > 5_000  # a lease, not a forever key
    assert store.complete("k", "me", "{}", 60) is True
    assert 0 < redis_client.ttl(f"{redis_prefix}k") <= 60  # the result TTL


# -- the ledger ---------------------------------------------------------------------------

def test_ledger_a_zombie_cannot_complete_or_release_the_new_owners_claim(engine: Engine) -> None:
    from core.gateway.model import Outcome

    clock = Clock()
    ledger = Ledger(engine, clock=clock)
    assert ledger.claim(intent("zombie")).outcome == "claimed"
    assert ledger.claim(intent("new-owner")).outcome == "in_progress"
    clock.advance(0.6)
    reclaimed = ledger.claim(intent("new-owner", lease_s=10))
    assert (reclaimed.outcome, reclaimed.attempts) == ("claimed", 2)
    assert ledger.complete(intent("x").key, "zombie", Outcome(result="zombie")) == "taken_over"
    assert ledger.release(intent("x").key, "zombie") is False
    entry = ledger.entry(intent("x").key)
    assert entry is not None
    assert (entry.owner, entry.state, entry.attempts) == ("new-owner", LedgerState.IN_PROGRESS, 2)
    assert ledger.complete(entry.key, "new-owner", Outcome(result="new")) == "recorded"
    replay = ledger.claim(intent("third"))
    assert replay.outcome == "replay" and replay.stored is not None
    assert replay.stored.result == "new"


def test_ledger_an_expired_non_idempotent_claim_needs_reconciliation(engine: Engine) -> None:
    clock = Clock()
    ledger = Ledger(engine, clock=clock)
    assert ledger.claim(intent("first", idempotent=False)).outcome == "claimed"
    clock.advance(0.6)
    assert ledger.claim(intent("second", idempotent=False)).outcome == "needs_reconciliation"
    assert [e.owner for e in ledger.stuck()] == ["first"]


@pytest.mark.parametrize("store", ["ledger", "redis"])
def test_gateway_a_zombie_run_gets_the_new_owners_result(store: str, engine: Engine,
                                                         request: pytest.FixtureRequest) -> None:
    claims, clock = None, Clock()
    if store == "redis":
        claims = RedisClaimStore(request.getfixturevalue("redis_client"),
                                 request.getfixturevalue("redis_prefix"))
    gateway = Gateway(Ledger(engine, clock=clock), claims, lease_s=0.2)
    call = ToolCall("exec.step", {"step": 1}, "executor", "case-1")
    zombie_started, new_owner_done = threading.Event(), threading.Event()

    def zombie(args: Mapping[str, Any]) -> Any:
        zombie_started.set()
        assert new_owner_done.wait(10)
        return {"by": "zombie"}

    lost_before = REGISTRY.get_sample_value("gateway_dedup_total", {"reason": "lost_lease"}) or 0
    with ThreadPoolExecutor(1) as pool:
        late = pool.submit(gateway.run, call, zombie, idempotent=True)
        assert zombie_started.wait(10)
        clock.advance(0.3)  # the zombie's lease ends while it still runs
        if claims is not None:
            let_redis_time_pass(claims.client, claims.prefix, 0.3)
        fresh = gateway.run(call, lambda args: {"by": "new owner"}, idempotent=True)
        new_owner_done.set()
        stale = late.result()
    assert (fresh.status, fresh.result, fresh.attempts) == (CallStatus.OK, {"by": "new owner"}, 2)
    assert (stale.status, stale.result) == (CallStatus.REPLAYED, {"by": "new owner"})
    assert REGISTRY.get_sample_value("gateway_dedup_total", {"reason": "lost_lease"}) == (
        lost_before + 1)
    entry = gateway.ledger.entry(fresh.key)
    assert entry is not None and entry.result == {"by": "new owner"}
    assert gateway.run(call, zombie).result == {"by": "new owner"}
    if claims is not None:
        assert claims.client.hget(claims.prefix + fresh.key, "outcome") is not None
        assert b"new owner" in claims.client.hget(claims.prefix + fresh.key, "outcome")


# -- fences -------------------------------------------------------------------------------

@dataclass
class Leased:
    """Session locks on one backend with the lease a test picks, and time passing for them: the
    SQL lock reads the test's clock; Redis keeps the lease on its own (let_redis_time_pass)."""

    engine: Engine
    clock: Clock
    redis: tuple[redis.Redis, str] | None = None  # the client and this test's key prefix

    def locks(self, lease_s: float) -> SessionLock:
        if self.redis is None:
            return SqlSessionLock(self.engine, lease_s=lease_s, clock=self.clock)
        client, prefix = self.redis
        return RedisSessionLock(client, self.engine, prefix=prefix, lease_s=lease_s)

    def lapse(self, seconds: float) -> None:
        self.clock.advance(seconds)
        if self.redis is not None:
            let_redis_time_pass(*self.redis, seconds)


@pytest.fixture(params=["sql", "redis"])
def leased(request: pytest.FixtureRequest, engine: Engine) -> Leased:
    if request.param == "sql":
        return Leased(engine, Clock())
    return Leased(engine, Clock(), (request.getfixturevalue("redis_client"),
                                    request.getfixturevalue("redis_prefix")))


@pytest.fixture
def locks(leased: Leased) -> SessionLock:
    return leased.locks(0.5)


def rows(engine: Engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (case_timeline, outbox, idempotency))


def test_a_run_that_lost_its_lock_is_refused_by_the_core(locks: SessionLock, leased: Leased,
                                                         engine: Engine,
                                                         service: CaseService) -> None:
    case_id = service.open_case(OpenCase("db down", "alice"), key="open-1").data()["case_id"]
    session = f"case-{case_id}"
    old = locks.acquire(session)
    assert old is not None
    assert locks.acquire(session) is None  # one run per session
    leased.lapse(0.6)  # the old run stalls past its lease
    new = locks.acquire(session)
    assert new is not None and new.fence.token > old.fence.token
    assert locks.release(old) is False  # the zombie cannot drop the new owner's lock
    assert locks.acquire(session) is None
    before = rows(engine)
    stale = service.transition(TransitionCase(uuid.UUID(case_id), CaseEvent.START_ANALYSIS,
                                              "agent", fence=old.fence), key="move-old")
    assert reply_status(stale) == 412 and '"stale_fence"' in stale.body
    assert rows(engine) == before  # refused before any row was written
    moved = service.transition(TransitionCase(uuid.UUID(case_id), CaseEvent.START_ANALYSIS,
                                              "agent", fence=new.fence), key="move-new")
    assert reply_status(moved) == 200 and moved.data()["version"] == 1
    assert locks.release(new) is True
    assert locks.acquire(session, wait_s=1.0) is not None


def test_the_gateway_refuses_a_stale_fence_and_runs_nothing(locks: SessionLock, leased: Leased,
                                                            engine: Engine) -> None:
    gateway = Gateway(Ledger(engine), lease_s=5)
    session = f"case-{uuid.uuid4().hex}"
    old = locks.acquire(session)
    assert old is not None
    leased.lapse(0.6)
    new = locks.acquire(session)
    assert new is not None
    ran: list[int] = []
    call = ToolCall("slack.post", {"text": "rolling back"}, "notifier", session)
    refused = gateway.run(call, lambda args: ran.append(1), fence=old.fence.token)
    assert refused.status is CallStatus.REFUSED
    assert refused.error is not None and refused.error["code"] == "stale_fence"
    assert refused.error["details"]["latest"] == new.fence.token
    assert gateway.ledger.entry(refused.key) is None  # nothing recorded: the intent is intact
    assert gateway.run(call, lambda args: ran.append(1) or "posted",
                       fence=new.fence.token).status is CallStatus.OK
    assert ran == [1]
    replayed = gateway.run(call, lambda args: ran.append(1), fence=old.fence.token)
    assert replayed.status is CallStatus.REPLAYED  # a replay runs nothing, so any fence may read it
    unknown = gateway.run(ToolCall("slack.post", {}, "notifier", "never-locked"),
                          lambda args: ran.append(1), fence=1)
    assert unknown.error is not None and unknown.error["code"] == "stale_fence"
    assert ran == [1]


# -- the core's fence check (core/cases/uow.py) -------------------------------------------

def test_the_core_refuses_a_stale_fence_before_writing(service: CaseService,
                                                        engine: Engine) -> None:
    case_id = uuid.UUID(service.open_case(OpenCase("disk full", "bob"), key="o").data()["case_id"])
    first, second = service.issue_fence("s"), service.issue_fence("s")
    assert second.token == first.token + 1
    before = rows(engine)
    move = TransitionCase(case_id, CaseEvent.START_ANALYSIS, "agent", fence=first)
    refused = service.transition(move, key="k1")
    assert reply_status(refused) == 412 and '"code":"stale_fence"' in refused.body
    assert rows(engine) == before
    assert service.get_case(case_id)["version"] == 0
    # Nothing was stored under the key: the same request with the current fence goes through.
    accepted = service.transition(
        TransitionCase(case_id, CaseEvent.START_ANALYSIS, "agent", fence=second), key="k1")
    assert reply_status(accepted) == 200
    never_issued = TransitionCase(case_id, CaseEvent.ANALYSIS_DONE, "agent",
                                  fence=Fence("unknown-session", 7))
    assert reply_status(service.transition(never_issued, key="k2")) == 412


def test_only_the_owner_renews_or_releases_and_holding_frees_the_lock(leased: Leased) -> None:
    locks, session = leased.locks(1.0), f"case-{uuid.uuid4().hex}"
    with holding(locks, session) as run:
        leased.lapse(0.6)
        assert locks.renew(run) is True
        leased.lapse(0.6)
        assert locks.acquire(session) is None  # renewed at 0.6 s: still held at 1.2 s
        impostor = SessionLease(session, "someone-else", run.fence)
        assert locks.renew(impostor) is False
        assert locks.release(impostor) is False
        with pytest.raises(Unavailable), holding(locks, session):
            pass
    after = locks.acquire(session)
    assert after is not None and after.fence.token == run.fence.token + 1
