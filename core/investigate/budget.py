"""How much a read tool may say: one answer within a token budget (cut, with a note of what was
cut), and all answers of one planning turn within a share of the model's context. Pure."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CHARS_PER_TOKEN = 4
"""The estimate every budget here uses (as ``agent.usage`` does for models without a
tokenizer)."""


def tokens_of(body: Any) -> int:
    return math.ceil(len(_text(body)) / CHARS_PER_TOKEN)


def _text(body: Any) -> str:
    return json.dumps(body, default=str, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Fitted:
    """An answer within its budget, and what was cut to get there (empty: nothing)."""

    body: dict[str, Any]
    cut: tuple[str, ...] = ()


def fit(body: Mapping[str, Any], max_tokens: int) -> Fitted:
    """``body`` within ``max_tokens``: the longest list loses items from its end, else the
    longest text loses its start (logs: the newest lines stay), until it fits or nothing is left
    to cut (keys and numbers stay); each cut is named in the answer's ``cut`` field (at most
    ``NOTES`` of them) so the model knows what it did not see."""
    fitted: dict[str, Any] = dict(body)
    totals: dict[str, tuple[int, str]] = {}  # path → its length before the first cut, unit
    left: dict[str, int] = {}
    while tokens_of({**fitted, "cut": _notes(totals, left, max_tokens)}) > max_tokens:
        path, value = _largest(fitted)
        if path is None:
            break
        shorter = _shorter(value)
        _put(fitted, path, shorter)
        where = ".".join(map(str, path))
        totals.setdefault(where, (len(value), "items" if isinstance(value, list) else
                                  "characters"))
        left[where] = len(shorter)
    notes = _notes(totals, left, max_tokens)
    if notes:
        fitted["cut"] = notes
    return Fitted(fitted, tuple(notes))


NOTES = 3
"""The cuts named one by one; more are counted in one more note (the notes are never cut)."""


def _notes(totals: Mapping[str, tuple[int, str]], left: Mapping[str, int],
           max_tokens: int) -> list[str]:
    notes = [f"{where}: {total - left[where]} of {total} {unit} cut to stay within "
             f"{max_tokens} tokens" for where, (total, unit) in totals.items()]
    if len(notes) <= NOTES:
        return notes
    return [*notes[:NOTES], f"and {len(notes) - NOTES} more lists or texts cut"]


def _shorter(value: list[Any] | str) -> list[Any] | str:
    if isinstance(value, list):
        return value[:max(0, len(value) * 3 // 4)] if len(value) > 1 else []
    keep = len(value) * 3 // 4
    return "…" + value[len(value) - keep:] if 1 < keep < len(value) - 1 else ""


def _largest(body: Any, path: tuple[Any, ...] = ()
             ) -> tuple[tuple[Any, ...] | None, Any]:
    """The path of the largest list or text in ``body`` (by its JSON size), if any."""
    best: tuple[tuple[Any, ...] | None, Any] = (None, None)
    best_size = 0
    children = body.items() if isinstance(body, Mapping) else \
        enumerate(body) if isinstance(body, list) else ()
    for key, value in children:
        if path == () and key == "cut":
            continue
        if isinstance(value, list | str) and len(value) > 0:
            size = len(_text(value))
            if size > best_size:
                best, best_size = ((*path, key), value), size
        if isinstance(value, Mapping | list):
            inner_path, inner = _largest(value, (*path, key))
            if inner_path is not None and len(_text(inner)) * 2 > best_size:
                best, best_size = (inner_path, inner), len(_text(inner))
    return best


def _put(body: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        body = body[key]
    body[path[-1]] = value


@dataclass
class TurnBudget:
    """What the read tools of one planning turn have said so far, against their share of the
    model's context; ``cuts`` collects every cut for the turn's ``agent_usage`` note."""

    limit_tokens: int
    used_tokens: int = 0
    cuts: list[str] = field(default_factory=list)

    @property
    def left(self) -> int:
        return max(0, self.limit_tokens - self.used_tokens)

    def spend(self, fitted: Fitted, tool: str) -> None:
        self.used_tokens += tokens_of(fitted.body)
        self.cuts.extend(f"{tool}: {cut}" for cut in fitted.cut)
