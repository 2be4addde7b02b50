"""A plan's sentences drawn in Slack mrkdwn: the adapters' words escaped, the plan's own values
set apart as code, every line cut between words (never inside one) with "…" within Block Kit's
limits. The JSON itself is only in the details view (``details_modal``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from bot.mrkdwn import at_word, escape, escape_controls
from core.domain.plans import ParsedPlan, StepAction
from core.domain.policy import number_words
from core.steps.words import Sentence, Value, plain_text

CUT = "…"
_SPACES = re.compile(r"\s+")
DETAILS_SECTION = 2900  # JSON per section of the details modal (Slack: 3000 with its fences)
DETAILS_SECTIONS = 40  # a modal holds 100 blocks; a plan's JSON is under 256 KiB
MORE_ROOM = 40  # what "… and N more" takes at the end of a fitted section


CHANGE_WORDS = {StepAction.K8S_ROLLOUT: "Kubernetes rollout", StepAction.SCRIPT_EXEC: "script",
                StepAction.GATEWAY_FLIP: "gateway flip", StepAction.HTTP_REQUEST: "HTTP request",
                StepAction.MCP_CALL: "MCP tool call"}


def risk_words(plan: ParsedPlan) -> str:
    """Why the plan's risk is what it is, in plain words: what it changes and whether it can be
    undone — "one Kubernetes rollout, reversible (a rollback is planned)"."""
    changes = [step for step in plan.steps if step.action != StepAction.NOOP]
    if not changes:
        return "it changes nothing"
    kinds = list(dict.fromkeys(CHANGE_WORDS.get(step.action, str(step.action))
                               for step in changes))
    what = (f"one {kinds[0]}" if len(changes) == 1
            else f"{number_words(len(changes))} changes ({', '.join(kinds)})")
    back = "reversible (a rollback is planned)" if plan.rollback else "no rollback planned"
    return f"{what}, {back}"


def said_mrkdwn(said: Sentence, limit: int) -> str:
    """``said`` as mrkdwn: at most ``limit`` characters as read (values and words alike), cut at
    a word with "…" when longer; values as code, every character escaped."""
    whole = len(plain_text(said)) <= limit
    room = limit if whole else limit - len(CUT)
    drawn: list[str] = []
    for part in said:
        text = _SPACES.sub(" ", part.text if isinstance(part, Value) else part)  # one line
        kept = text if len(text) <= room else at_word(text, room)
        room -= len(kept)
        if kept:
            drawn.append(_code(kept) if isinstance(part, Value) else escape(kept))
        if kept != text:
            return "".join(drawn).rstrip() + CUT
    return "".join(drawn)


def _code(text: str) -> str:
    """A value as inline code: on one line, no backtick to end it early."""
    return "`" + escape_controls(" ".join(text.split()).replace("`", "'")) + "`"


def fitted(title: str, lines: Iterable[str], limit: int = 3000, *,
           where: str = " (see Details)", kept_for_more: int = MORE_ROOM) -> str:
    """``title`` and as many whole ``lines`` as fit in ``limit`` characters; the rest
    counted ("… and 3 more", then ``where`` the rest can be read), in the ``kept_for_more``
    characters kept for that line."""
    listed = list(lines)
    text = title
    for kept, line in enumerate(listed):
        room = limit - (kept_for_more if kept < len(listed) - 1 else 0)
        if len(text) + 1 + len(line) > room:
            return f"{text}\n… and {len(listed) - kept} more{where}"
        text = f"{text}\n{line}"
    return text


def _chunks(text: str, limit: int) -> list[str]:
    """``text`` escaped, in pieces of at most ``limit`` characters, never inside an escape."""
    pieces: list[str] = []
    piece: list[str] = []
    size = 0
    for char in text:
        drawn = escape_controls(char)  # inside the JSON's code block: no emphasis to draw
        if size + len(drawn) > limit:
            pieces.append("".join(piece))
            piece, size = [], 0
        piece.append(drawn)
        size += len(drawn)
    return [*pieces, "".join(piece)] if piece else pieces


def details_modal(title: str, plan: Mapping[str, Any] | object) -> dict[str, Any]:
    """The modal the ``Details`` button opens: the plan's exact JSON, in code blocks."""
    text = json.dumps(plan, indent=2, sort_keys=True, ensure_ascii=False)
    pieces = _chunks(text, DETAILS_SECTION)
    shown = pieces[:DETAILS_SECTIONS]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{piece}```"}}
        for piece in shown]
    if len(pieces) > len(shown):
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text":
                       f"{len(pieces) - len(shown)} more part(s): the REST API has it whole"}]})
    whole = " ".join(title.split())
    heading = at_word(whole, 60)
    heading = "the plan" if not heading else heading if heading == whole else f"{heading}…"
    return {"type": "modal",
            "title": {"type": "plain_text", "text": "Plan details"},
            "close": {"type": "plain_text", "text": "Close"},
            "blocks": [{"type": "context", "elements": [{"type": "mrkdwn", "text":
                        f"The exact plan JSON of “{escape(heading)}” — what the executor reads"}]},
                       *blocks]}
