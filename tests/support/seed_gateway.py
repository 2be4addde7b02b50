"""The seed's tool gateway (post-mortem 002, section 5), rebuilt from its description as the bar
to beat: SET NX seen-key, cached result, delete-on-error, on redis-py's own retries.

Kept faithful on purpose, flaws included: a SET NX whose reply was lost is retried by redis-py and
then answers "already exists" (its own key), so the intent is suppressed without ever running; a
failed result write deletes the seen-key, so the next delivery runs the side effect again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.driver_info import DriverInfo
from redis.exceptions import ConnectionError, TimeoutError
from redis.retry import Retry


def seed_redis(port: int, *, socket_timeout: float = 1.0, **options: Any) -> redis.Redis:
    """A client configured as the seed runs it: redis-py retries connection errors and timeouts.

    RESP2 and no handshake commands (no HELLO, CLIENT SETINFO or MAINT_NOTIFICATIONS, as with
    the seed's redis 5.* defaults minus SETINFO): each reply the proxy drops is then the reply
    to a command, so "30% of replies lost" means 30% of commands, not more on every reconnect.
    """
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        retry=Retry(ExponentialBackoff(), 3),
        retry_on_error=[ConnectionError, TimeoutError],
        protocol=2,
        driver_info=DriverInfo(name=None, lib_version=None),
        **({"decode_responses": True} | options),
    )


@dataclass
class SeedToolRequest:
    name: str
    args: dict[str, Any]
    user_id: str
    session_id: str
    idem_key: str | None = None
    fencing_token: int | None = None


def make_idem_key(request: SeedToolRequest) -> str:
    payload = {"name": request.name, "user": request.user_id, "args": request.args}
    raw = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


class SeedGateway:
    """``tool_gateway`` of the seed, with its key namespace under ``prefix`` for test isolation."""

    def __init__(self, client: redis.Redis, prefix: str = "agent:") -> None:
        self.r = client
        self.prefix = prefix

    def next_fencing_token(self, session_id: str) -> int:
        return int(self.r.incr(f"{self.prefix}session:{session_id}:fencing"))

    def tool_gateway(
        self,
        executor: Callable[[dict[str, Any]], dict[str, Any]],
        request: SeedToolRequest,
        ttl_sec: int = 3600,
    ) -> dict[str, Any]:
        idem_key = request.idem_key or make_idem_key(request)
        request.fencing_token = request.fencing_token or self.next_fencing_token(request.session_id)
        key_seen = f"{self.prefix}idem:seen:{request.name}:{idem_key}"
        key_result = f"{self.prefix}idem:result:{request.name}:{idem_key}"

        # First arrival? (SET NX). A retried SET NX whose first reply was lost lands here too.
        first = self.r.set(name=key_seen, value=request.fencing_token, nx=True, ex=ttl_sec)
        if not first:
            cached = self.r.get(key_result)
            if cached:
                return dict(json.loads(cached))
            return {"status": "dedup", "message": "duplicate suppressed"}

        start = time.time()
        try:
            result = executor(request.args)
            payload = {
                "status": "ok",
                "result": result,
                "latency_ms": int((time.time() - start) * 1000),
                "fencing": request.fencing_token,
            }
            self.r.set(key_result, json.dumps(payload, ensure_ascii=False), ex=ttl_sec)
            return payload
        except Exception:
            # The seed's "clean up so a retry can run": also undoes a side effect that DID happen.
            self.r.delete(key_seen)
            raise
