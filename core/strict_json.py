"""JSON as RFC 8259 has it: numbers are finite. Python's ``json`` reads ``NaN``, ``Infinity`` and
``-Infinity`` (and pydantic's floats allow them), and every comparison with NaN is false, so a
bound such as ``risk_score <= 1`` lets one through. Wherever JSON enters — the REST API, Slack
payloads, the model's tool arguments, a ChangePlan — such numbers are refused with this module.

Nesting is bounded too (``MAX_DEPTH``; RFC 8259 lets a reader set the limit): Python's reader and
every recursive walk after it run out of stack on a document nested thousands deep, which no
sender of ours needs (Slack, Alertmanager, MCP and our own bodies stay within a dozen levels).

Text a document must be storable as (I-JSON, RFC 7493, and PostgreSQL's ``jsonb``): no lone
surrogates, no NUL character."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from core.errors import BadRequest, OpsgateError

Path = list[str | int]
MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a document may have (``[[1]]`` is 2 deep)."""


class NonFiniteNumber(OpsgateError, ValueError):
    """A document holds NaN or ±Infinity (a ``ValueError`` too, as ``json.loads`` raises)."""

    code = "non_finite_number"


class TooDeep(BadRequest, ValueError):
    """A document nested deeper than ``MAX_DEPTH`` (a ``ValueError`` too, as ``json.loads``
    raises)."""

    code = "json_too_deep"

    def __init__(self, limit: int = MAX_DEPTH) -> None:
        super().__init__(f"the JSON is nested deeper than {limit} levels of arrays and objects",
                         limit=limit)


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that refuses NaN and ±Infinity (``NonFiniteNumber``) and nesting deeper
    than ``max_depth`` (``TooDeep``), never running out of stack."""
    try:
        value = json.loads(text, parse_constant=_refuse)
    except RecursionError:
        raise TooDeep(max_depth) from None
    if too_deep(value, max_depth):
        raise TooDeep(max_depth)
    return value


def too_deep(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (parsed JSON) nests arrays and objects deeper than ``max_depth``;
    iterative, like every walk here."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            inner: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            inner = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in inner
                     if isinstance(child, Mapping | list | tuple))
    return False


def _refuse(constant: str) -> Any:
    raise NonFiniteNumber(f"{constant} is not a number JSON allows")


def non_finite(value: Any) -> Iterator[tuple[Path, float]]:
    """Where ``value`` (parsed JSON) holds NaN or ±Infinity, and what; iterative, so a deeply
    nested document cannot exhaust the interpreter's stack."""
    stack: list[tuple[Path, Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            yield path, item
        elif isinstance(item, Mapping):
            stack.extend(([*path, str(key)], inner) for key, inner in item.items())
        elif isinstance(item, list | tuple):
            stack.extend(([*path, n], inner) for n, inner in enumerate(item))


def unstorable_text(value: Any) -> Iterator[tuple[Path, str]]:
    """Where ``value`` holds a string or key that is not valid Unicode or contains NUL, and
    why."""
    stack: list[tuple[Path, Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            yield from ((path, why) for why in _text_flaws(item))
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                yield from ((path, f"key {key!r}: {why}") for why in _text_flaws(str(key)))
                stack.append(([*path, str(key)], inner))
        elif isinstance(item, list | tuple):
            stack.extend(([*path, n], inner) for n, inner in enumerate(item))


def _text_flaws(text: str) -> list[str]:
    flaws = []
    if "\x00" in text:
        flaws.append("contains NUL (\\u0000), which cannot be stored")
    if any("\ud800" <= char <= "\udfff" for char in text):
        flaws.append("is not valid Unicode (a lone surrogate)")
    return flaws


def where(path: Path, root: str) -> str:
    """``path`` as people read it: ``plan.steps[0].params``; a key that cannot be printed (NUL,
    a lone surrogate) is quoted with its escapes, so the path itself can be stored."""
    return root + "".join(_step(part) for part in path)


def _step(part: str | int) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    return f".{part}" if part.isprintable() else f"[{part!r}]"


def unstorable_text_problems(value: Any, root: str) -> list[str]:
    """One line for each string in ``value`` that cannot be stored."""
    return [f"{where(path, root)}: {why}" for path, why in unstorable_text(value)]


def non_finite_problems(value: Any, root: str) -> list[str]:
    """One line for each NaN or ±Infinity in ``value``."""
    return [f"{where(path, root)}: {number!r} is not a number JSON allows (NaN and Infinity are "
            "refused)" for path, number in non_finite(value)]
