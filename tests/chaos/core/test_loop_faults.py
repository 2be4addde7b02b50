"""The production loop (``opsgate relay`` and ``opsgate consume`` processes on PostgreSQL and Redis
Streams) outlives its infrastructure, measured case by case:

- Redis loses its data (restarted without persistence while messages were published but not
  yet consumed): the lost messages are found by the inbox (not assumed delivered at XADD),
  reported by readiness and reconcile while late, and sent again by the relay's delivery
  watchdog; consumers create their lost groups again at once. Every case ends.
- PostgreSQL is cut off for seconds (a TCP proxy in front of it aborts every connection and
  refuses new ones) while the relay and consumers work: both retry and keep running, and every
  case ends.

Each run counts cases driven, ended and stuck (0), and step requests sent twice (0): each plan's
one step POSTs to a server on 127.0.0.1 that counts requests by Idempotency-Key. Bounded (about
half a minute each) and on 127.0.0.1 only: its own redis-server on a free port, its own schema.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine, func, select, text

from core.bootstrap import App, bootstrap
from core.consumers import subscriptions
from core.db.tables import outbox
from core.loop_processes import stream_bus, streams_client
from core.messaging.consumer import ConsumerRunner
from core.messaging.streams import StreamConsumer
from core.ops.readiness import readiness
from core.ops.reconcile import Reconciler
from core.settings import Settings
from tests.support.chaos_proxy import ChaosProxy
from tests.support.local_http import LocalServer, local_server
from tests.support.loop_processes import (
    FINAL,
    PROCESS_CONSUMERS,
    EffectPlanner,
    _effect,
    requests_by_case,
    statuses,
    undelivered,
    wait_until,
)
from tests.support.metrics import STAND_IN_ENV, STAND_IN_METRICS
from tests.support.peers import poll
from tests.support.processes import Process, clean_env
from tests.support.redis_server import RedisServer
from tests.support.servers import REDIS_URL

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.chaos, pytest.mark.loop]

CASES = 24
DELIVERY_BOUND_S = 3.0
RUN_DEADLINE_S = 45.0


@dataclass
class Loop:
    """One relay and one consume process, and the planner on threads of the test."""

    app: App
    engine: Engine
    server: LocalServer
    relay: Process
    consume: Process
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.relay.start()
        self.consume.start()
        self.relay.wait_for_output("messages waiting")
        self.consume.wait_for_output("on Redis streams")
        bus = stream_bus(self.app.settings, streams_client(str(self.app.settings.redis_url)))
        runner = ConsumerRunner(self.engine, EffectPlanner(self.app, self.server.url("/effect")))
        stream = StreamConsumer(bus, runner, block_ms=200, claim_idle_ms=2000,
                                name="test-planner")
        thread = threading.Thread(target=stream.run, args=(self.stop,), daemon=True)
        thread.start()
        self.threads.append(thread)

    def open_cases(self, count: int) -> list[UUID]:
        from core.domain.commands import OpenCase

        run = f"{time.monotonic_ns():x}"
        return [UUID(self.app.cases.open_case(
            OpenCase(title=f"checkout errors, shard {n}", actor="pagerduty"),
            f"fault-{run}-{n}").data()["case_id"]) for n in range(count)]

    def tally(self, case_ids: list[UUID]) -> dict[str, int]:
        """Cases driven, ended, stuck; step requests and those sent more than once."""
        final = statuses(self.engine, case_ids)
        keys, _by_case = requests_by_case(self.server)
        ended = sum(1 for status in final.values() if status in FINAL)
        return {"driven": len(case_ids), "ended": ended, "stuck": len(case_ids) - ended,
                "requests": sum(keys.values()),
                "duplicates": sum(n - 1 for n in keys.values() if n > 1)}

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)
        for process in (self.relay, self.consume):
            if process.alive:
                process.thaw()
            process.close()


@contextmanager
def production_loop(tmp_path: Path, pg_engine: Engine, *, redis_url: str, stream_prefix: str,
                    database_url: str | None = None,
                    delivery_bound_s: float = DELIVERY_BOUND_S) -> Iterator[Loop]:
    """Relay and consume processes on ``redis_url`` and the test's schema (through
    ``database_url`` when given: a proxy), the test's own app on the schema directly."""
    with local_server({"/effect": _effect}) as server:
        direct = pg_engine.url.render_as_string(hide_password=False)
        knobs = {
            "OPSGATE_DATABASE_URL": database_url or direct, "OPSGATE_REDIS_URL": redis_url,
            "OPSGATE_STREAM_PREFIX": stream_prefix,
            "OPSGATE_GATEWAY_KEY_PREFIX": f"{stream_prefix}gw:",
            "OPSGATE_AUTO_APPROVE": "low_risk",
            "OPSGATE_HTTP_ALLOWLIST": json.dumps([server.base + "/"]),
            "OPSGATE_RELAY_POLL_S": "0.5", "OPSGATE_STREAM_CLAIM_IDLE_S": "2",
            "OPSGATE_DELIVERY_BOUND_S": str(delivery_bound_s), **STAND_IN_ENV,
        }
        settings = Settings(_env_file=None, database_url=direct, redis_url=redis_url,
                            stream_prefix=stream_prefix,
                            gateway_key_prefix=knobs["OPSGATE_GATEWAY_KEY_PREFIX"],
                            auto_approve="low_risk", http_allowlist=[server.base + "/"],
                            delivery_bound_s=delivery_bound_s, static_metrics=STAND_IN_METRICS)
        app = bootstrap(settings, engine=pg_engine)
        env = clean_env(**knobs)
        loop = Loop(app, pg_engine, server,
                    Process("relay", ("relay", "--progress-s", "0.2"), env,
                            tmp_path / "relay.log"),
                    Process("consume", ("consume", *PROCESS_CONSUMERS, "--workers", "2",
                                        "--progress-s", "1"), env, tmp_path / "consume.log"))
        try:
            loop.start()
            yield loop
        finally:
            loop.close()
            app.gateway.close()


def observed(app: App) -> dict[str, Any]:
    """What an operator sees: /readyz's delivery check and reconcile's findings by kind. The
    processes run without Slack, so the notifier's posts are held (reconcile's ``held_post``):
    counted apart, as what this configuration is expected to show."""
    ready = readiness(app)
    findings = Reconciler(app.engine, outbox_bound_s=60.0,
                          delivery_bound_s=app.settings.delivery_bound_s).run().findings
    kinds = Counter(finding.kind for finding in findings)
    held = kinds.pop("held_post", 0)
    return {"readyz": ready["status"], "delivery": ready["checks"].get("delivery"),
            "reconcile": dict(kinds), "held_posts": held}


def without_a_request(loop: Loop, case_ids: list[UUID]) -> dict[UUID, str]:
    """The cases whose step never reached the target, with their status."""
    _keys, by_case = requests_by_case(loop.server)
    return {case_id: status for case_id, status in statuses(loop.engine, case_ids).items()
            if str(case_id) not in by_case}


def unpublished(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(outbox)
                                .where(outbox.c.published_at.is_(None))).scalar_one())


def topics_of() -> dict[str, tuple[str, ...]]:
    """Which consumers' inbox rows prove a message delivered, as the watchdog reads it (building
    the consumers would start a notifier, which hands held posts out again)."""
    return subscriptions()


def lost_with_redis(loop: Loop) -> int:
    """Messages published (XADD accepted) that some consumer of their topic has not recorded:
    what a Redis losing its data takes with it."""
    lost: set[int] = set()
    with loop.engine.connect() as conn:
        for consumer, topics in topics_of().items():
            lost.update(conn.execute(text(
                "select o.id from outbox o where o.published_at is not null and "
                "o.topic = any(:topics) and not exists (select 1 from inbox i where "
                "i.consumer = :consumer and i.message_id = o.id)"),
                {"topics": list(topics), "consumer": consumer}).scalars())
    return len(lost)


def _reported(seen: dict[str, Any], lost: int) -> dict[str, Any] | None:
    return seen if seen["delivery"].get("undelivered") == lost else None


# -- Redis loses its data --------------------------------------------------------------------


def test_a_redis_restarted_without_its_data_costs_latency_never_a_case(tmp_path, pg_engine):
    with RedisServer(tmp_path) as redis_server, production_loop(
            tmp_path, pg_engine, redis_url=redis_server.url, stream_prefix="fault:") as loop:
        case_ids = loop.open_cases(CASES)
        # Mid-way: some cases moved on, then the consumers stop taking messages while the
        # relay publishes what they wrote; Redis then holds messages nobody recorded.
        wait_until(lambda: loop.tally(case_ids)["requests"] >= 3, RUN_DEADLINE_S,
                   "for the first steps to run")
        loop.consume.freeze()
        wait_until(lambda: unpublished(loop.engine) == 0, 10, "for the relay to publish all")
        loop.relay.freeze()
        redis_server.restart()  # streams, groups, pending entries and gateway keys: gone
        lost = lost_with_redis(loop)
        assert lost > 0, "nothing was in flight when Redis restarted"

        # During: once the bound passed, the lost messages are reported (nobody sent them
        # again yet: the relay is frozen).
        during = poll(lambda: _reported(observed(loop.app), lost), DELIVERY_BOUND_S + 10,
                      "for readiness and reconcile to report the lost messages")
        assert during["readyz"] == "not_ready", during
        assert during["delivery"]["ok"] is False, during
        assert during["delivery"]["undelivered"] == lost, (during, lost)
        assert during["reconcile"].get("undelivered") == lost, (during, lost)

        loop.relay.thaw()
        loop.consume.thaw()
        wait_until(lambda: loop.tally(case_ids)["stuck"] == 0, RUN_DEADLINE_S,
                   f"for every case to end after the Redis restart ({loop.tally(case_ids)})")
        wait_until(lambda: not undelivered(loop.engine, topics_of()), 15,
                   "for every message to reach its consumers")
        tally = loop.tally(case_ids)
        after = observed(loop.app)
        assert tally == {"driven": CASES, "ended": CASES, "stuck": 0, "requests": CASES,
                         "duplicates": 0}, tally
        assert after["readyz"] == "ready", after
        assert after["delivery"] == {"ok": True, "undelivered": 0,
                                     "bound_s": DELIVERY_BOUND_S}, after
        assert after["reconcile"] == {}, after
        for line in ("creating it again", "sending it again"):
            assert line in loop.consume.output() + loop.relay.output(), line
        assert loop.relay.alive and loop.consume.alive
        print(f"\nRedis data loss: {lost} messages lost at the restart; {tally}; during: "
              f"{during}; after: {after}")


# -- PostgreSQL cut off ----------------------------------------------------------------------


CUT_S = 5.0
CUT_CASES = 16


def test_a_postgres_cut_while_the_relay_runs_ends_no_process_and_no_case(
        tmp_path, pg_engine, redis_client, redis_prefix):
    with ChaosProxy(pg_engine.url.port or 5432, time_limit_s=90) as proxy:
        proxied = pg_engine.url.set(host="127.0.0.1", port=proxy.port)
        with production_loop(tmp_path, pg_engine, redis_url=REDIS_URL,
                             stream_prefix=f"{redis_prefix}stream:",
                             database_url=proxied.render_as_string(hide_password=False),
                             delivery_bound_s=10.0) as loop:
            case_ids = loop.open_cases(CUT_CASES)
            wait_until(lambda: loop.tally(case_ids)["requests"] >= 3, RUN_DEADLINE_S,
                       "for the first steps to run")
            proxy.cut()
            time.sleep(CUT_S)  # the outage itself: nothing to wait for but its length
            cut_off = loop.relay.alive, loop.consume.alive
            during = observed(loop.app)  # the test's own app reaches PostgreSQL directly
            proxy.heal()
            wait_until(lambda: loop.tally(case_ids)["stuck"] == 0, RUN_DEADLINE_S,
                       f"for every case to end after the cut ({loop.tally(case_ids)}); relay "
                       f"alive: {loop.relay.alive}\n{loop.relay.output()[-1500:]}")
            tally = loop.tally(case_ids)
            wait_until(lambda: not undelivered(loop.engine, topics_of()), 30,
                       "for every message to reach its consumers")
            after = observed(loop.app)
            assert cut_off == (True, True), loop.relay.output()[-2000:]
            assert loop.relay.alive and loop.consume.alive, loop.relay.output()[-2000:]
            # A cut that lands on a step's claim mid-commit leaves the call's fate unknown: the
            # case parks for a person (reconcile names the call), never runs the step again.
            unsure = without_a_request(loop, case_ids)
            assert tally == {"driven": CUT_CASES, "ended": CUT_CASES, "stuck": 0,
                             "requests": CUT_CASES - len(unsure), "duplicates": 0}, tally
            assert set(unsure.values()) <= {"PARKED"}, unsure
            assert proxy.counts["refused"] > 0, proxy.counts
            assert "retrying in" in loop.relay.output(), loop.relay.output()[-2000:]
            assert "working again after" in loop.relay.output(), loop.relay.output()[-2000:]
            assert after["readyz"] == "ready", after
            assert set(after["reconcile"]) <= ({"stuck_call", "unknown_outcome"} if unsure
                                               else set()), (after, unsure)
            print(f"\nPostgreSQL cut {CUT_S:g}s: {tally}; parked for a person: {len(unsure)}; "
                  f"proxy {dict(proxy.counts)}; during: {during}; after: {after}")
