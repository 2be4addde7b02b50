"""Production wiring: the gateway with Redis in front of the ledger (and the Redis session lock)
on PostgreSQL. The agent's repeats replay from Redis, and a run whose Redis lock was taken over
writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import Engine

from agent.scripted import ScriptedChatModel
from core.bootstrap import App
from core.domain.fsm import CaseStatus
from core.domain.plan_templates import load_template
from core.gateway import build_gateway, session_of
from core.gateway import redis_client as make_redis_client
from core.settings import Settings
from tests.support.agents import agent_app, ai, call, case_at, make_agent, plans
from tests.support.servers import REDIS_URL

NOOP = load_template("noop")


@pytest.fixture
def redis_app(pg_engine: Engine, redis_client: redis.Redis, redis_prefix: str) -> Iterator[App]:
    app = agent_app(pg_engine, gateway_key_prefix=redis_prefix)
    app.gateway = build_gateway(Settings(gateway_key_prefix=redis_prefix), pg_engine,
                                make_redis_client(REDIS_URL))
    yield app
    app.gateway.close()


@pytest.mark.redis
def test_repeats_replay_from_redis(redis_app: App, redis_client: redis.Redis,
                                   redis_prefix: str) -> None:
    case_id = case_at(redis_app, CaseStatus.PLANNING)
    propose = {"case_id": str(case_id), "plan": NOOP}
    model = ScriptedChatModel(turns=[ai(call("propose_plan", **propose)), ai(content="one"),
                                     ai(call("propose_plan", **propose)), ai(content="two")])
    assistant = make_agent(redis_app, model)

    assistant.converse(case_id, "plan", user="U1", correlation_id="c1")
    assistant.converse(case_id, "plan again", user="U1", correlation_id="c2")

    assert plans(redis_app.engine, case_id) == 1
    assert '"replayed"' in str(model.seen[-1][-1].content)
    assert list(redis_client.scan_iter(match=f"{redis_prefix}*"))


@pytest.mark.redis
def test_a_run_whose_redis_lock_was_taken_over_writes_nothing(
        redis_app: App, redis_client: redis.Redis, redis_prefix: str) -> None:
    case_id = case_at(redis_app, CaseStatus.PLANNING)
    taken: list[Any] = []

    class Usurper(ScriptedChatModel):
        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> Any:
            redis_client.delete(f"{redis_prefix}lock:{session_of(case_id)}")  # lease lapsed
            locks = redis_app.gateway.locks
            assert locks is not None
            taken.append(locks.acquire(session_of(case_id)))
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = Usurper(turns=[ai(call("propose_plan", case_id=str(case_id), plan=NOOP))])
    reply = make_agent(redis_app, model).converse(case_id, "plan", user="U1", correlation_id="c")

    assert "superseded" in reply and taken[0] is not None
    assert plans(redis_app.engine, case_id) == 0
