"""The Redis fast path of the gateway: claim-or-replay, complete and release, each ONE round
trip through a Lua script (EVALSHA, loaded on NOSCRIPT).

A key is a hash ``{state, args, owner, outcome}``. A claim is a lease: the hash expires after
``lease_ms`` unless completed, and only its owner (a token the caller picked before the call)
may complete or release it. Redis is a cache of the ledger, never the only record: see ledger.py.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple, cast

import redis
from redis.exceptions import NoScriptError

_CLAIM = """
local rec = redis.call('HMGET', KEYS[1], 'state', 'args', 'owner', 'outcome')
if not rec[1] then
  redis.call('HSET', KEYS[1], 'state', 'running', 'args', ARGV[1], 'owner', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
if rec[2] ~= ARGV[1] then return {'mismatch'} end
if rec[1] == 'done' then return {'replay', rec[4]} end
if rec[3] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'mine'}
end
return {'in_progress'}
"""

_COMPLETE = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'outcome', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""

_RELEASE = """
local rec = redis.call('HMGET', KEYS[1], 'state', 'owner')
if rec[1] == 'running' and rec[2] == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def text(value: Any) -> str:
    """redis-py answers bytes unless the client decodes; the gateway speaks str."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class LuaScript:
    """A script run by EVALSHA: one round trip once loaded; loads itself on NOSCRIPT (after a
    restart or SCRIPT FLUSH)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest()

    def __call__(self, client: redis.Redis, keys: list[str], args: list[str | int]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)


class Claim(NamedTuple):
    """``outcome`` is claimed | mine | replay | in_progress | mismatch; ``result`` is the stored
    outcome JSON of a replay."""

    outcome: str
    result: str | None = None


class RedisClaimStore:
    """Claims, completions and releases of idempotency keys in Redis."""

    def __init__(self, client: redis.Redis, prefix: str = "opsgate:gw:") -> None:
        self.client = client
        self.prefix = prefix
        self._claim = LuaScript(_CLAIM)
        self._complete = LuaScript(_COMPLETE)
        self._release = LuaScript(_RELEASE)

    def claim_or_replay(self, key: str, args_hash: str, owner_token: str, lease_ms: int) -> Claim:
        reply = cast(list[Any], self._claim(self.client, [self.prefix + key],
                                            [args_hash, owner_token, lease_ms]))
        outcome = text(reply[0])
        return Claim(outcome, text(reply[1]) if len(reply) > 1 else None)

    def complete(self, key: str, owner_token: str, result: str, ttl_s: int) -> bool:
        """Store the outcome, if ``owner_token`` still owns the claim."""
        return bool(self._complete(self.client, [self.prefix + key], [owner_token, result, ttl_s]))

    def release(self, key: str, owner_token: str) -> bool:
        """Drop a running claim, if ``owner_token`` still owns it."""
        return bool(self._release(self.client, [self.prefix + key], [owner_token]))
