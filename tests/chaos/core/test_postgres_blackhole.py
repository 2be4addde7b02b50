"""A PostgreSQL blackhole (issue 40): behind a proxy that drops every byte both ways and closes
nothing, ``/readyz`` and a REST read answer 503 within 5 s — through a pooled connection that
stops answering and through a new one that never completes — instead of hanging; once the link
heals, they answer again. Each request runs in a thread joined within a bound, so a hang fails
the test rather than stalling it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from core.api import create_api
from core.db.database import make_engine
from core.domain.commands import OpenCase
from tests.support.api import bearer
from tests.support.apps import make_app
from tests.support.chaos_proxy import ChaosProxy

pytestmark = pytest.mark.chaos

ANSWER_WITHIN_S = 5.0


def answered(call: Callable[[], Any]) -> Any:
    """``call()``'s result, or a failure when it has not answered within ANSWER_WITHIN_S."""
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(ANSWER_WITHIN_S)
    assert result, f"no answer within {ANSWER_WITHIN_S:g}s"
    return result[0]


def test_readyz_and_rest_answer_503_in_time_during_a_blackhole(pg_engine):
    with ChaosProxy(pg_engine.url.port or 5432, seed=40, time_limit_s=90) as proxy:
        engine = make_engine(pg_engine.url.set(host="127.0.0.1", port=proxy.port)
                             .render_as_string(hide_password=False), pool_size=2)
        app = make_app(engine)
        try:
            case_id = app.cases.open_case(OpenCase(title="checkout 5xx", actor="U0ALICE"),
                                          uuid.uuid4().hex).data()["case_id"]
            auth = bearer(engine, "reader", None, "reader")
            with TestClient(create_api(app), base_url="http://localhost") as client:
                assert client.get("/readyz").status_code == 200
                assert client.get(f"/case/{case_id}", headers=auth).status_code == 200

                proxy.blackhole()  # pooled connections stop answering
                pooled = answered(lambda: client.get(f"/case/{case_id}", headers=auth))
                ready = answered(lambda: client.get("/readyz"))
                engine.dispose()  # and a new connection never completes
                fresh = answered(lambda: client.get(f"/case/{case_id}", headers=auth))

                proxy.heal()
                engine.dispose()
                healed = answered(lambda: client.get(f"/case/{case_id}", headers=auth))
        finally:
            app.close()
            engine.dispose()

    assert (pooled.status_code, pooled.json()["error"]["code"]) == (503, "unavailable")
    assert fresh.status_code == 503 and fresh.json()["error"]["code"] == "unavailable"
    assert ready.status_code == 503
    assert ready.json()["data"]["checks"]["database"]["ok"] is False
    assert healed.status_code == 200
    assert proxy.counts["blackholed"] >= 1
