"""Idempotency keys: canonical JSON of a call's arguments and the stable hash a call maps to;
and the session a case's calls run in (``session_of``).

Canonical means: keys sorted, integral numbers as integers (``1 == 1.0``), strings in Unicode
NFC, tuples as lists, sets sorted. Two deliveries of one intent get one key whatever the
transport did to the formatting.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import unicodedata
import uuid
from collections.abc import Mapping, Set
from decimal import Decimal
from typing import Any

from core.gateway.model import ToolCall

CASE_SESSION = "case:"


def normalized(text: str) -> str:
    """Text as a person means it: case-folded, runs of white space as one space, so a retry that
    changed only spacing or case is the same intent."""
    return " ".join(text.casefold().split())


def short_digest(text: str) -> str:
    """A short stable key part for a string: 24 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def text_key(text: str) -> str:
    """The key part of free text (a title, a note): the short digest of its ``normalized`` form."""
    return short_digest(normalized(text))


def session_of(case_id: uuid.UUID | str) -> str:
    """The gateway session of a case: its lock, its fence, its calls in the ledger, and the
    agent's conversation thread are all keyed by it."""
    return f"{CASE_SESSION}{case_id}"


def case_of_session(session_id: str) -> str:
    """The case id ``session_of`` put in ``session_id``; any other session comes back as it is."""
    return session_id.removeprefix(CASE_SESSION)


def canonical(value: Any) -> Any:
    """``value`` as plain JSON data in canonical form; raises TypeError/ValueError if it has
    no stable JSON meaning (NaN, arbitrary objects)."""
    kind = type(value)
    if kind is str:  # the common cases first: this runs on every call, replays included
        return unicodedata.normalize("NFC", value)
    if kind is int:
        return value
    if kind is dict:
        return _mapping(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float | Decimal):
        return _number(value)
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, Mapping):
        return _mapping(value)
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    if isinstance(value, Set):
        return sorted((canonical(item) for item in value), key=canonical_json)
    if isinstance(value, dt.datetime | dt.date | uuid.UUID):
        return str(value) if isinstance(value, uuid.UUID) else value.isoformat()
    raise TypeError(f"{type(value).__name__} has no canonical JSON form")


def _number(value: float | Decimal) -> int | float:
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise ValueError("NaN and infinities have no canonical JSON form")
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    return int(number) if number.is_integer() else number


def _mapping(value: Mapping[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = _key(key)
        if name in out:
            raise ValueError(f"two keys normalise to {name!r}")
        out[name] = canonical(item)
    return out


def _key(key: Any) -> str:
    if isinstance(key, str):
        return unicodedata.normalize("NFC", key)
    if isinstance(key, int | float | Decimal) and not isinstance(key, bool):
        return json.dumps(canonical(key))
    raise TypeError(f"a mapping key of type {type(key).__name__} has no canonical form")


def canonical_json(value: Any) -> str:
    """Canonical JSON text: the bytes that get hashed."""
    return json.dumps(canonical(value), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def args_hash(args: Mapping[str, Any]) -> str:
    """The fingerprint of a call's arguments; the same key with another fingerprint is a reuse."""
    return digest(dict(args))


def call_key(call: ToolCall, scope: str = "", fingerprint: str | None = None) -> str:
    """The idempotency key of ``call``: tool + business key (or canonical args) + scope.
    ``fingerprint``: ``args_hash(call.args)`` if the caller has it already."""
    identity: dict[str, Any] = {"tool": call.tool, "scope": scope}
    if call.business_key is not None:
        identity["business_key"] = call.business_key
    else:
        identity["args"] = fingerprint or args_hash(call.args)
    return digest(identity)
