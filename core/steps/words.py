"""A step in words: the sentence each adapter writes for a step it would run ("Restart
deployment shop/checkout"), as plain words and the plan's own values, never a chat format.

``Value`` marks what came from the plan (a name, a command, a URL): a front end shows it as
written, escaped, set apart (Slack: code). A step whose params the adapter would refuse is said
as such, naming the fields at fault, never with their values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError


@dataclass(frozen=True)
class Value:
    """A value taken from the plan, shown as written and set apart from the words around it."""

    text: str


Sentence = tuple["str | Value", ...]
"""A step in words, in order: plain words and the plan's values."""

M = TypeVar("M", bound=BaseModel)
FIELDS_NAMED = 4  # a refused step names at most this many fields at fault


def sentence(*parts: str | Value | None) -> Sentence:
    """The parts given, without the Nones (an optional clause left out)."""
    return tuple(part for part in parts if part is not None)


def plain_text(said: Sentence) -> str:
    """The sentence as one plain line (values as written)."""
    return "".join(part if isinstance(part, str) else part.text for part in said)


def refused(action: str, error: ValidationError) -> Sentence:
    """A step whose params the adapter refuses: what it is and which fields are at fault."""
    fields = _fields(error.errors(include_url=False))
    named = ", ".join(fields[:FIELDS_NAMED]) + (", …" if len(fields) > FIELDS_NAMED else "")
    return (f"A {action} step whose parameters it refuses ({named or 'their shape'}): "
            "it cannot run",)


def _fields(errors: Iterable[Mapping[str, Any]]) -> list[str]:
    found: list[str] = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ())) or "params"
        if where not in found:
            found.append(where[:40])
    return found


def json_words(value: object) -> str:
    """A small JSON value in words for a sentence: ``{enabled: false}``, ``[1, 2]``, ``"on"``;
    keys are not quoted. What no sentence should hold is left to the details view."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key}: {json_words(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(json_words(item) for item in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return f"{value:g}" if isinstance(value, float) else str(value)


def validated(model: type[M], params: Mapping[str, Any]) -> M | ValidationError:
    """``params`` as ``model``, or the error the adapter would refuse them with."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as error:
        return error
