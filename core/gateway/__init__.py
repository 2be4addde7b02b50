"""The tool gateway: idempotent, leased, fenced side effects with a durable ledger.

    call = ToolCall("create_order", {"user": "u1", "order_ref": "r1"}, actor="agent",
                    session_id="case-42")
    result = gateway.run(call, create_order_executor, fence=run.fence.token)

See docs/gateway.md for the design.
"""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from sqlalchemy import Engine

from core.clock import Clock, utcnow
from core.gateway.gateway import Gateway
from core.gateway.keys import (
    args_hash,
    call_key,
    canonical,
    canonical_json,
    case_of_session,
    session_of,
)
from core.gateway.ledger import Ledger, LedgerEntry, LedgerState
from core.gateway.model import (
    BusinessRefusal,
    CallResult,
    CallStatus,
    DirectSideEffectCall,
    ToolCall,
    ToolCallFailed,
    reply_data,
)
from core.gateway.redis_store import Claim, RedisClaimStore
from core.gateway.registry import SideEffect, side_effect
from core.gateway.session_lock import (
    RedisSessionLock,
    SessionLease,
    SessionLock,
    SqlSessionLock,
    holding,
)
from core.settings import Settings

__all__ = [
    "BusinessRefusal",
    "CallResult",
    "CallStatus",
    "Claim",
    "DirectSideEffectCall",
    "Gateway",
    "Ledger",
    "LedgerEntry",
    "LedgerState",
    "RedisClaimStore",
    "RedisSessionLock",
    "SessionLease",
    "SessionLock",
    "SideEffect",
    "SqlSessionLock",
    "ToolCall",
    "ToolCallFailed",
    "args_hash",
    "build_gateway",
    "call_key",
    "canonical",
    "canonical_json",
    "case_of_session",
    "holding",
    "redis_client",
    "reply_data",
    "session_of",
    "side_effect",
]


def redis_client(url: str, timeout_s: float = 0.5) -> redis.Redis:
    """A client that fails fast: explicit socket timeouts and two quick retries, so an outage
    costs milliseconds before the gateway falls back to the ledger."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(ExponentialBackoff(cap=0.05, base=0.005), retries=2),
        retry_on_timeout=True,
        health_check_interval=30,
    )


def build_gateway(settings: Settings, engine: Engine, redis: redis.Redis | None = None, *,
                  clock: Clock = utcnow) -> Gateway:
    """The gateway for ``settings``: with ``redis`` (or ``settings.redis_url``) Redis is the fast
    path in front of the ledger; without, the ledger alone is the claim store. The ledger's
    claims and the SQL session locks expire by ``clock``; Redis' keys by Redis' own."""
    client = redis
    if client is None and settings.redis_url:
        client = redis_client(settings.redis_url, settings.gateway_redis_timeout_s)
    prefix, lease_s = settings.gateway_key_prefix, settings.gateway_lease_s
    locks: SessionLock = (
        SqlSessionLock(engine, lease_s=lease_s, clock=clock) if client is None
        else RedisSessionLock(client, engine, prefix=prefix, lease_s=lease_s)
    )
    claims = None if client is None else RedisClaimStore(client, prefix)
    return Gateway(Ledger(engine, clock=clock), claims, locks=locks, lease_s=lease_s,
                   result_ttl_s=settings.gateway_result_ttl_s)
