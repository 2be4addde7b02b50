"""``opsgate export <case>``: a case's postmortem in Markdown (summary, timeline — pinned chat
messages included —, plans, approvals, step results, verification, model usage) to paste into a
docs tool. Read-only. What came from outside (titles, reasons, names, plan steps) reads as
written: Markdown's link, emphasis, HTML and entity syntax in it is escaped, and code is fenced
by more backticks than it holds, so nothing in it becomes a link or markup."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, select

from core.cases.progress import STEP_EVENTS, attempt_of, pin_of, reading_of
from core.cases.rows import timeline_view
from core.cases.timeline import Entry, entries_of
from core.chat import PINNED_EVENT
from core.db.case_store import as_utc
from core.db.tables import case_timeline, ops_case, plan_approved, plan_proposed
from core.errors import NotFound

Row = Mapping[Any, Any]


Names = Callable[[str], str]


def export_case(engine: Engine, case_id: UUID, name: Names = str) -> str:
    """The postmortem of ``case_id`` as Markdown; ``name`` says who an actor is (a Slack id as
    the person's name in the catalog; as written when it knows none)."""
    with engine.connect() as conn:
        case = conn.execute(select(ops_case).where(ops_case.c.id == case_id)).mappings().first()
        if case is None:
            raise NotFound(f"no case {case_id}", case_id=str(case_id))
        timeline = entries_of(timeline_view(row) for row in conn.execute(
            select(case_timeline).where(case_timeline.c.case_id == case_id)
            .order_by(case_timeline.c.id)).mappings())
        plans = list(conn.execute(select(plan_proposed)
                                  .where(plan_proposed.c.case_id == case_id)
                                  .order_by(plan_proposed.c.case_version)).mappings())
        decisions = list(conn.execute(select(plan_approved)
                                      .where(plan_approved.c.case_id == case_id)
                                      .order_by(plan_approved.c.created_at)).mappings())
    parts = [_summary(case, timeline), _timeline(timeline, name), _plans(plans, timeline, name),
             _approvals(decisions, name), _steps(timeline), _verification(timeline),
             _usage(timeline)]
    return "\n\n".join(part for part in parts if part) + "\n"


# -- sections ---------------------------------------------------------------------------------


def _summary(case: Row, timeline: Sequence[Entry]) -> str:
    opened, changed = as_utc(case["created_at"]), as_utc(case["updated_at"])
    path = [str(entry.target) for entry in timeline if entry.moved]
    lines = [f"# Postmortem: {_text(case['title'])}", "",
             f"- **Case:** `{case['id']}`",
             f"- **Severity:** {_text(case['severity'])} · **Status:** {case['status']} "
             f"(version {case['version']}) · **Tenant:** {_text(case['tenant'])}",
             f"- **Opened:** {_when(opened)} · **Last change:** {_when(changed)} "
             f"· **Duration:** {_duration(opened, changed)}",
             f"- **Path:** {' → '.join(path) or '-'}"]
    return "\n".join(lines)


def _timeline(timeline: Sequence[Entry], name: Names) -> str:
    rows = []
    for entry in timeline:
        move = (f"{entry.source or '∅'} → {entry.target}" if entry.moved
                else f"({entry.outcome})")
        trace = _code(entry.correlation_id) if entry.correlation_id else "-"
        rows.append((_at(entry), _code(entry.event), _text(name(entry.shown_actor)), move,
                     _reason(entry, name), trace))
    return ("## Timeline\n\nEach row's correlation id: `opsgate trace <id>` shows its whole "
            "path.\n\n" + _table(("When (UTC)", "Event", "Actor", "Move", "Reason",
                                  "Correlation id"), rows))


def _reason(entry: Entry, name: Names) -> str:
    """A row's reason; a pinned chat message as its author, its words and its link."""
    if entry.event != PINNED_EVENT:
        return _text(entry.reason or "")
    pin = pin_of(entry)
    link = _destination(pin.permalink or "")
    shown = f" ([message]({link}))" if link.startswith("https://") else ""
    author = "?" if pin.author is None else name(pin.author)
    return f"📌 pinned: {_text(author)} said “{_text(pin.said or '')}”{shown}"


def _plans(plans: Sequence[Row], timeline: Sequence[Entry], name: Names) -> str:
    if not plans:
        return "## Plan\n\nNo plan was proposed."
    blocks = ["## Plan" if len(plans) == 1 else f"## Plans ({len(plans)}, oldest first)"]
    for row in plans:
        plan = row["plan"]
        blocks.append(f"### {_text(str(plan.get('title', 'untitled')))}\n\n"
                      f"- **Hash:** `{row['plan_hash']}` · **Proposed by:** "
                      f"{_text(name(_proposer(row, timeline)))} at case version "
                      f"{row['case_version']} · **Requested by:** "
                      f"{_text(name(str(row['proposed_by'])))} · "
                      f"**Risk:** {_text(str(plan.get('risk_score', '-')))}")
        steps = [(str(n + 1), _code(s.get("action")), _code(_json(s.get("params", {}))),
                  _text(str(s.get("timeout_s", "-"))), _text(str(s.get("retry", "-"))))
                 for n, s in enumerate(plan.get("steps") or [])]
        blocks.append(_table(("#", "Action", "Params", "Timeout (s)", "Retry"), steps))
        blocks.append(f"**Rollback:** {_code(_json(plan.get('rollback')))}\n\n"
                      f"**Verify:** {_code(_json(plan.get('verify')))}")
    return "\n\n".join(blocks)


def _proposer(plan: Row, timeline: Sequence[Entry]) -> str:
    """Who proposed ``plan``: the actor of the ``plan_ready`` move that admitted it (the planner,
    the agent, a principal) — not ``proposed_by``, the requester it was proposed for."""
    for entry in timeline:
        if (entry.event == "plan_ready" and entry.accepted
                and entry.plan_hash == plan["plan_hash"]
                and entry.version == plan["case_version"]):
            return entry.shown_actor
    return "-"


def _approvals(decisions: Sequence[Row], name: Names) -> str:
    if not decisions:
        return "## Approvals\n\nNo approval or rejection was recorded."
    rows = [(_text(name(str(d["decision"].get("approver", "-")))),
             _text(str(d["decision"].get("verdict", "-"))), f"`{str(d['plan_hash'])[:12]}`",
             _text(str(d["decision"].get("at", "-"))),
             _text(str(d["decision"].get("reason") or ""))) for d in decisions]
    return "## Approvals\n\n" + _table(("Approver", "Decision", "Plan", "At", "Reason"), rows)


def _steps(timeline: Sequence[Entry]) -> str:
    rows = []
    for attempt in (attempt_of(e) for e in timeline if e.event in STEP_EVENTS):
        rows.append((_text(_or_dash(attempt.phase)), str(attempt.step + 1),
                     _text(_or_dash(attempt.attempt)), _code(_or_dash(attempt.action)),
                     "ok" if attempt.ok else "failed", _text(_or_dash(attempt.duration_s)),
                     _text(attempt.summary or "")))
    if not rows:
        return "## Step results\n\nNo step ran."
    return "## Step results\n\n" + _table(
        ("Phase", "Step", "Attempt", "Action", "Result", "Seconds", "Summary"), rows)


def _verification(timeline: Sequence[Entry]) -> str:
    lines = []
    for entry in timeline:
        if entry.event == "verify_result":
            reading = reading_of(entry)
            verdict = "passed" if reading.passed else "failed"
            lines.append(f"- {_at(entry)}: {verdict} — {_text(reading.said or '')} "
                         f"(observed {_text(_or_dash(reading.observed))})")
        elif entry.event in ("verify_pass", "verify_failed"):
            lines.append(f"- {_at(entry)}: `{entry.event}` → {entry.target}")
    return "## Verification\n\n" + ("\n".join(lines) if lines else "Not verified.")


def _usage(timeline: Sequence[Entry]) -> str:
    """Model calls and tokens the agent noted (``agent_usage`` notes' meta), per model."""
    totals: dict[str, list[int]] = {}
    for entry in timeline:
        facts = entry.context
        if "tokens_in" not in facts and "model_calls" not in facts:
            continue
        seen = totals.setdefault(str(facts.get("model", "unknown")), [0, 0, 0])
        for n, name in enumerate(("model_calls", "tokens_in", "tokens_out")):
            seen[n] += int(facts.get(name) or 0)
    if not totals:
        return "## Model usage\n\nNo model usage was noted."
    rows = [(_code(model), str(calls), str(tin), str(tout))
            for model, (calls, tin, tout) in sorted(totals.items())]
    return "## Model usage\n\n" + _table(("Model", "Calls", "Tokens in", "Tokens out"), rows)


# -- Markdown ---------------------------------------------------------------------------------


def _table(header: Iterable[str], rows: Sequence[Sequence[str]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
              for row in rows]
    return "\n".join(lines)


# Markdown's syntax that can make a link, an HTML tag, an entity, emphasis or code of text: a
# backslash, a backtick, ``*``, ``~``, brackets, ``_`` at a word's edge (inside a word it is
# just a letter), ``<`` unless a space follows (``a < b`` opens no tag nor autolink), ``&``
# before an entity, and a ``#`` at the end (a heading's closing sequence).
_MARKUP = re.compile(r"[\\`*~\[\]]|(?<![^\W_])_|_(?![^\W_])|<(?!\s|$)|&(?=#?\w+;)|#$")
_BACKTICKS = re.compile(r"`+")
_URL_ENDS = {" ": "%20", "(": "%28", ")": "%29", "<": "%3C", ">": "%3E"}


def _text(value: str) -> str:
    """Text from outside on one line, as written: it links nowhere and formats nothing."""
    return _MARKUP.sub(lambda found: "\\" + found.group(), " ".join(value.split()))


def _code(value: object) -> str:
    """``value`` on one line as an inline code span, fenced by one backtick more than its
    longest run of them (CommonMark: a span ends only at a run of the same length)."""
    text = " ".join(str(value).split()) or "-"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _destination(url: str) -> str:
    """A link's destination with the characters that would end it percent-encoded."""
    for char, code in _URL_ENDS.items():
        url = url.replace(char, code)
    return url


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=str)


def _at(entry: Entry) -> str:
    return _when(datetime.fromisoformat(str(entry.at)))


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _duration(start: datetime, end: datetime) -> str:
    seconds = int((end - start).total_seconds())
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h {rest // 60:02d}m {rest % 60:02d}s" if hours else \
        f"{rest // 60}m {rest % 60:02d}s"


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)
