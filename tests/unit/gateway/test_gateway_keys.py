"""Idempotency keys: canonical arguments give one key per intent, whatever the formatting."""

from __future__ import annotations

import unicodedata
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.gateway import ToolCall, args_hash, call_key, canonical_json

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12,
)
json_args = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def _call(args: dict[str, Any], **overrides: Any) -> ToolCall:
    return ToolCall(**{"tool": "create_order", "args": args, "actor": "agent",
                       "session_id": "case-1", **overrides})


def _reversed_order(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reversed_order(v) for k, v in reversed(list(value.items()))}
    if isinstance(value, list):
        return [_reversed_order(v) for v in value]
    return value


def _ints_as_floats(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: _ints_as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints_as_floats(v) for v in value]
    return value


def _nfd(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFD", value)
    if isinstance(value, dict):
        return {_nfd(k): _nfd(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nfd(v) for v in value]
    return value


@given(json_args)
def test_dict_order_does_not_change_the_key(args: dict[str, Any]) -> None:
    assert call_key(_call(args)) == call_key(_call(_reversed_order(args)))


@given(json_args)
def test_integral_floats_and_ints_give_the_same_key(args: dict[str, Any]) -> None:
    assert call_key(_call(args)) == call_key(_call(_ints_as_floats(args)))


@given(st.dictionaries(st.text(max_size=6).map(lambda s: unicodedata.normalize("NFC", s)),
                       json_values, max_size=5))
def test_unicode_normalisation_does_not_change_the_key(args: dict[str, Any]) -> None:
    assert call_key(_call(args)) == call_key(_call(_nfd(args)))


@given(json_args, json_args)
def test_different_args_give_different_keys(first: dict[str, Any],
                                            second: dict[str, Any]) -> None:
    if canonical_json(first) != canonical_json(second):
        assert call_key(_call(first)) != call_key(_call(second))
        assert args_hash(first) != args_hash(second)


def test_examples_of_one_intent() -> None:
    one = {"amount": 1, "note": "caf\u00e9", "items": [{"sku": "A", "qty": 2}]}
    other = {"items": [{"qty": 2.0, "sku": "A"}], "note": "cafe\u0301", "amount": Decimal("1.00")}
    assert call_key(_call(one)) == call_key(_call(other))
    assert canonical_json({"b": 1, "a": [1.5, (2, 3)]}) == '{"a":[1.5,[2,3]],"b":1}'


def test_the_business_key_decides_and_args_only_fingerprint() -> None:
    first = _call({"amount": 1}, business_key="u1:r1")
    same_intent_other_args = _call({"amount": 2}, business_key="u1:r1")
    assert call_key(first) == call_key(same_intent_other_args)
    assert args_hash(first.args) != args_hash(same_intent_other_args.args)
    assert call_key(first) != call_key(_call({"amount": 1}, business_key="u1:r2"))


def test_tool_and_scope_are_part_of_the_key() -> None:
    call = _call({"amount": 1})
    assert call_key(call) != call_key(_call({"amount": 1}, tool="refund"))
    assert call_key(call) != call_key(call, scope="tenant-b")
    assert call_key(call) == call_key(_call({"amount": 1}, actor="someone else"))


def test_non_json_values_are_refused_loudly() -> None:
    with pytest.raises(ValueError, match="NaN"):
        args_hash({"amount": float("nan")})
    with pytest.raises(TypeError):
        args_hash({"when": object()})
    with pytest.raises(ValueError, match="normalise"):
        args_hash({"caf\u00e9": 1, "cafe\u0301": 2})
