"""Text an attacker writes into alerts, titles, plans and threads (issue 24), and how the tests
find what survives of it: Slack's control sequences in mrkdwn, links and HTML in Markdown."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st
from markdown_it import MarkdownIt

# The exact payloads: an alert's name and its summary.
EVIL_NAME = "Evil <!channel> <https://evil.example|click here> *bold*"
EVIL_SUMMARY = "<!channel> please <https://evil.example/login|re-login to Okta> now"

# Slack's control sequences and Markdown's link and HTML syntax, as an attacker writes them.
TOKENS = ("<!channel>", "<!here>", "<!everyone>", "<!subteam^S0EVIL|@oncall>", "<@U0EVIL>",
          "<@U0EVIL|boss>", "<#C0EVIL>", "<#C0EVIL|general>", "<https://evil.example|click>",
          "<https://evil.example>", "<mailto:x@evil.example|mail>", "&lt;!channel&gt;",
          "[re-login](https://evil.example/login)", "![x](https://evil.example/x.png)",
          "<a href=\"https://evil.example\">y</a>", "<https://evil.example/auto>", "`", "```",
          "*", "_", "~", "|", "&", "&amp;", "&#60;", "\\", "#", "\n", "<", ">")
hostile = st.lists(st.one_of(st.sampled_from(TOKENS),
                             st.text(alphabet="ab <>|!@#&*_`~[]()\\:/.", max_size=12),
                             st.text(st.characters(exclude_categories=("Cs",),
                                                   exclude_characters="\x00"), max_size=8)),
                   min_size=1, max_size=8).map("".join)
"""Words mixed with every control sequence above, and anything else that can be stored (not
NUL nor a lone surrogate: PostgreSQL refuses them, and opsgate replaces them on intake)."""

SLACK_TOKEN = re.compile(r"<([^<>]*)>")


def mrkdwn_texts(value: Any) -> Iterator[str]:
    """Every string Slack reads as mrkdwn in a Web API call's arguments, a reply or a rendered
    message: ``text`` fallbacks and every mrkdwn object's ``text``, however deep (a
    ``plain_text`` object shows its text literally, by Slack's definition)."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)  # blocks arrive form-encoded as a JSON string
        except ValueError:
            return
        if isinstance(parsed, list | dict):
            yield from mrkdwn_texts(parsed)
        return
    if isinstance(value, list | tuple):
        for item in value:
            yield from mrkdwn_texts(item)
    elif isinstance(value, dict) and value.get("type") != "plain_text":
        for name, item in value.items():
            if name == "text" and isinstance(item, str):
                yield item
            else:
                yield from mrkdwn_texts(item)


def slack_tokens(text: str, ours: frozenset[str] = frozenset()) -> list[str]:
    """The control sequences in mrkdwn ``text`` that are not in ``ours`` (the mentions and
    links opsgate itself writes): a ``<!…>``, ``<@…>``, ``<#…>`` or ``<…|…>`` link."""
    return [found for found in SLACK_TOKEN.findall(text) if found not in ours]


def markdown_smuggled(markdown: str, links: frozenset[str] = frozenset()) -> list[str]:
    """What CommonMark (with GFM tables and strikethrough) makes of ``markdown`` that no text
    should: a link or image to anywhere but ``links``, raw HTML."""
    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    found = []
    for token in parser.parse(markdown):
        for child in [token, *(token.children or [])]:
            if child.type in ("link_open", "image") and child.attrGet("href") not in links \
                    and child.attrGet("src") not in links:
                found.append(f"{child.type} {child.attrs}")
            elif child.type in ("html_inline", "html_block"):
                found.append(f"{child.type} {child.content!r}")
    return found


def markdown_heading(markdown: str) -> str:
    """The first heading's text as a reader sees it (CommonMark)."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    at = next(n for n, token in enumerate(tokens) if token.type == "heading_open")
    inline = tokens[at + 1]
    return "".join(child.content for child in inline.children or []
                   if child.type in ("text", "code_inline"))
