"""An alert's words as opsgate stores them: characters PostgreSQL refuses are replaced and text
over its field's budget is cut, so no notification is refused for what its alerts say.

PostgreSQL refuses NUL (``\\u0000``) in text and JSONB, and a lone UTF-16 surrogate (which JSON
may carry as ``\\ud800``) cannot be encoded as UTF-8 at all: both become U+FFFD. Text is cut by
characters (never inside a UTF-8 sequence), at the last space when one is near, and ends in a
marker: how much was cut for evidence, an ellipsis for what a person reads as a line.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_REFUSED = re.compile("[\x00\ud800-\udfff]")
_NEAR = 0.8  # a space in the last fifth of what is kept is where a cut ends


def storable(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD."""
    return _REFUSED.sub(REPLACEMENT, text)


def cut(text: str, limit: int) -> str:
    """``text`` made storable, and when longer than ``limit`` characters cut to at most
    ``limit``, ending in ``… [N characters cut]`` (what evidence keeps)."""
    text = storable(text)
    if len(text) <= limit:
        return text
    kept = _head(text, limit - len(_marker(len(text))))
    return kept + _marker(len(text) - len(kept))


def shortened(text: str, limit: int) -> str:
    """``text`` made storable, and when longer than ``limit`` characters cut to at most
    ``limit``, ending in ``…`` (what a title or a line of the thread says)."""
    text = storable(text)
    return text if len(text) <= limit else _head(text, limit - 1) + "…"


def _head(text: str, room: int) -> str:
    """At most ``room`` characters of ``text``, ending at a space when one is near."""
    kept = text[:max(0, room)]
    space = max(kept.rfind(" "), kept.rfind("\n"))
    if space >= room * _NEAR:
        kept = kept[:space]
    return kept.rstrip()


def _marker(dropped: int) -> str:
    return f"… [{dropped:,} characters cut]"
