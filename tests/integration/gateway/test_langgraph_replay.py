"""The LangGraph case: a node calls a gateway tool and then ``interrupt()``s; on resume LangGraph
re-runs the node from the top, so the tool is called again, and the gateway must answer that
second call with a replay of the first result (the executor ran once)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict

import pytest
import redis
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from sqlalchemy import Engine

from core.gateway import CallResult, CallStatus, Gateway, build_gateway, side_effect
from core.gateway import redis_client as make_redis_client
from core.settings import Settings
from tests.support.servers import REDIS_URL


class OrderState(TypedDict, total=False):
    user: str
    order_ref: str
    order: dict[str, Any]
    confirmed: bool


def order_key(args: Mapping[str, Any]) -> str:
    return f"{args['user']}:{args['order_ref']}"


class Shop:
    """The side effect under test, counting its own executions, and what the node was told."""

    def __init__(self) -> None:
        self.executions: list[Mapping[str, Any]] = []
        self.answers: list[CallResult] = []

        @side_effect("create_order", business_key=order_key)
        def create_order(args: Mapping[str, Any]) -> dict[str, Any]:
            self.executions.append(dict(args))
            return {"order_id": f"ORD-{args['order_ref']}-{len(self.executions)}", "amount": 2}

        self.create_order = create_order


def order_graph(gateway: Gateway, shop: Shop, checkpoints: Path) -> Any:
    """place_order: call the tool through the gateway, then wait for the human's confirmation."""

    def place_order(state: OrderState) -> OrderState:
        answer = gateway.invoke(shop.create_order,
                                {"user": state["user"], "order_ref": state["order_ref"],
                                 "amount": 2},
                                actor="agent", session_id=f"case-{state['order_ref']}")
        shop.answers.append(answer)
        confirmed = interrupt({"confirm_order": answer.result})
        return {"order": answer.result, "confirmed": bool(confirmed)}

    builder = StateGraph(OrderState)
    builder.add_node("place_order", place_order)
    builder.add_edge(START, "place_order")
    builder.add_edge("place_order", END)
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    return builder.compile(checkpointer=saver)


def run_interrupt_then_resume(gateway_factory: Any, tmp_path: Path) -> Shop:
    shop = Shop()
    checkpoints = tmp_path / "checkpoints.sqlite"
    config = {"configurable": {"thread_id": "case-ORD-7"}}

    paused = order_graph(gateway_factory(), shop, checkpoints).invoke(
        {"user": "U1", "order_ref": "ORD-7"}, config)
    assert "__interrupt__" in paused  # the node stopped at interrupt() after the tool call
    # A fresh graph, saver connection and gateway: as if the bot restarted before the click.
    final = order_graph(gateway_factory(), shop, checkpoints).invoke(
        Command(resume=True), config)

    first, second = shop.answers
    assert [first.status, second.status] == [CallStatus.OK, CallStatus.REPLAYED]
    assert second.result == first.result and second.key == first.key
    assert len(shop.executions) == 1
    assert final["order"] == first.result and final["confirmed"] is True
    return shop


def test_resumed_node_replays_the_tool_call_from_the_ledger(engine: Engine, tmp_path: Path) -> None:
    """The embedded default: the ledger alone is the claim store (SQLite and PostgreSQL)."""
    run_interrupt_then_resume(lambda: build_gateway(Settings(), engine), tmp_path)


@pytest.fixture
def gateways_on_redis(
    pg_engine: Engine, redis_client: redis.Redis, redis_prefix: str
) -> Iterator[Any]:
    built: list[Gateway] = []
    settings = Settings(gateway_key_prefix=redis_prefix)

    def factory() -> Gateway:
        built.append(build_gateway(settings, pg_engine, make_redis_client(REDIS_URL)))
        return built[-1]

    yield factory
    for gateway in built:
        gateway.close()


@pytest.mark.redis
def test_resumed_node_replays_the_tool_call_from_redis(
    gateways_on_redis: Any, redis_client: redis.Redis, redis_prefix: str, tmp_path: Path
) -> None:
    """Production: Redis in front of the ledger; the replay is served by Redis."""
    run_interrupt_then_resume(gateways_on_redis, tmp_path)
    assert list(redis_client.scan_iter(match=f"{redis_prefix}*"))  # the fast path was used
