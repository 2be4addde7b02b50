"""The one way text from outside — alert labels and annotations, titles, findings, model output,
thread text, step output, reasons — enters a chat message: Slack mrkdwn, where ``&``, ``<`` and
``>`` are the control characters. Escaped, no mention (``<!channel>``, ``<@U…>``, ``<#C…>``) and
no link (``<url|label>``) survives. Nor does emphasis: mrkdwn has no backslash escape, so a mark
that could open or close bold, italic or strike (``*``, ``_``, ``~`` where a word starts or ends,
and the full-width ``*`` and ``_``) is drawn as its look-alike (U+2217 asterisk operator, U+02CD
low macron, U+223C tilde operator: the replacements jsx-slack's ``<Escape>`` uses): a title
``*Risk* 0.0 — approved`` reads as those words, never as one of opsgate's bold labels. A mark
inside a word (``http_requests_total``, ``2*3``) forms no emphasis and stays as written; so does
a backtick (opsgate's own sentences quote commands in code, and code draws no field). Inside
code, where emphasis is not drawn, ``escape_controls`` escapes the control characters alone.

Links opsgate itself adds (an alert's graph, a pinned message) are built by ``link``; what a
Slack message said is read back as plain words by ``from_slack`` before it is shown again.
What the core says (``core.chat.Said``: plain words and opsgate's own links) is drawn in mrkdwn
by ``drawn``. Pure functions: Slack formatting is the bot's alone.
"""

from __future__ import annotations

import re

from core.alerts.text import shortened, storable
from core.chat import Said

_TOKEN = re.compile(r"<([^<>\n]*)>")
BOUNDARY = re.compile(r"[\s/.,:;=_()\[\]{}-]")
"""Where a word ends: a space or punctuation (a path's slash, an id's dash)."""
_URL_ENDS = {"|": "%7C", "<": "%3C", ">": "%3E", " ": "%20", "\n": "%0A", "\t": "%09"}


_LOOKALIKE = {"*": "\u2217", "_": "\u02cd", "~": "\u223c", "\uff0a": "\ufe61",
              "\uff3f": "\u2e0f"}
"""Emphasis marks and the look-alike each is drawn as where it could format text."""
_EMPHASIS = re.compile(r"(?<![^\W_])[*_~]|[*_~](?![^\W_])|[\uff0a\uff3f]")
"""A mark not between two letters or digits (or a full-width mark): where mrkdwn could read it
as emphasis."""


def escape(text: object) -> str:
    """``text`` as Slack mrkdwn shows it literally (None is empty): its control characters
    escaped, its emphasis marks drawn as look-alikes."""
    said = "" if text is None else str(text)
    return escape_controls(_EMPHASIS.sub(lambda mark: _LOOKALIKE[mark.group()], said))


def escape_controls(text: object) -> str:
    """``text``'s control characters escaped, its marks kept: for text inside code (a value, the
    plan's JSON), where mrkdwn draws no emphasis and a look-alike would change what is read."""
    said = "" if text is None else str(text)
    return said.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def shown(text: object, limit: int) -> str:
    """``text`` escaped on one line, cut where a word ends to at most ``limit`` characters (as
    read, before escaping), ending in ``…`` when cut; only a single word longer than the line
    is cut inside."""
    flat = storable(" ".join(("" if text is None else str(text)).split()))
    if len(flat) <= limit:
        return escape(flat)
    kept = at_word(flat, limit - 1) or shortened(flat, limit)[:-1]
    return escape(kept.rstrip(" ,;:") + "…")


def at_word(text: str, room: int) -> str:
    """At most ``room`` characters of ``text``, ending where a word ends (before a space or
    punctuation, or at the end); empty when not even the first word fits."""
    if len(text) <= room:
        return text
    kept = text[:max(0, room)]
    if BOUNDARY.match(text[len(kept)]):
        return kept.rstrip()
    ends = [m.start() for m in BOUNDARY.finditer(kept)]
    return kept[:ends[-1]].rstrip() if ends else ""


def link(url: object, label: str) -> str:
    """opsgate's own link to ``url`` (http or https only, else ""), labelled ``label``: the
    URL's characters that would end the link or start its label are percent-encoded."""
    target = "" if url is None else str(url).strip()
    if not target.startswith(("http://", "https://")):
        return ""
    for char, code in _URL_ENDS.items():
        target = target.replace(char, code)
    return f"<{target}|{escape(label)}>"


def drawn(said: Said) -> str:
    """What the core says, as mrkdwn: its words escaped, its links drawn by ``link`` (a link
    that is not http or https is left out)."""
    return "".join(escape(part) if isinstance(part, str) else link(part.url, part.label)
                   for part in said)


def from_slack(text: object) -> str:
    """What a Slack message says, as plain words: ``<!channel>`` → ``@channel``, ``<@U1|ann>``
    → ``@ann``, ``<#C1|ops>`` → ``#ops``, ``<https://x|docs>`` → ``docs (https://x)``, and
    Slack's ``&lt;`` ``&gt;`` ``&amp;`` undone. To show it again, ``escape`` it."""
    said = _TOKEN.sub(lambda token: _words(token.group(1)), "" if text is None else str(text))
    return said.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _words(token: str) -> str:
    target, _, label = token.partition("|")
    if token.startswith("!"):  # <!here>, <!subteam^S1|@oncall>, <!date^…|fallback>
        return label or f"@{target[1:].split('^')[0]}"
    if token.startswith(("@", "#")):
        return f"{token[0]}{label.lstrip('@#')}" if label else target
    address = target.removeprefix("mailto:")
    return f"{label} ({address})" if label and label != address else address
