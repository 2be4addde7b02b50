"""The case card and the catch-up, as Block Kit: pure functions of a case's state (its timeline,
its latest plan and the approval policy's numbers), so any render of the same state is the same
message, and a render of a later state never shows less.

The card is one message per case, kept current in place: status and severity, what is
happening, the plan at the gate with the quorum's progress, steps as they run, verification
with its live reading and deadline, the outcome, pinned messages. The thread itself gets only
what asks for a human or records a decision (``outcome_post``: PARKED with why, CLOSED).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.blocks import Block, Message, section, short_id, who
from core.alerts.text import shortened
from core.chat import PINNED_EVENT
from core.consumers.notifier_text import alert_text
from core.domain.messages import StepResultPayload, TransitionPayload
from core.domain.views import CaseView, ProposedPlan, TimelineEntry
from core.mrkdwn import escape, link, shown

CARD_BLOCK = "case_card"
"""The ``block_id`` of the card's first block; the card's other blocks start with it too."""
SECTION_LIMIT = 3000  # Slack: a section's text
HEADER_LIMIT = 150  # Slack: a header's plain text
LINE_LIMIT = 220  # one line on the card, so that a phone shows it in two or three
STEP_LIMIT = 110  # one step's line: twenty steps fit in one section
LISTED = 3  # findings, alerts and pins shown at most
CATCHUP_EVENTS = 5

STATUS_MARK = {"NEW": "🆕", "ANALYZING": "🔎", "PLANNING": "📝", "WAIT_GATE": "⏸️",
               "EXECUTING": "⚙️", "VERIFYING": "🧪", "CLOSED": "✅", "PARKED": "🅿️"}
FINDINGS_EVENTS = ("analysis_findings", "findings")
ALERT_EVENTS = ("alert_firing", "alert_new", "alert_resolved", "alert_recurrence")


@dataclass(frozen=True)
class CaseState:
    """What the card and the catch-up are rendered from."""

    case: CaseView
    rows: Sequence[TimelineEntry]  # the case's timeline, oldest first
    plan: ProposedPlan | None = None  # the latest proposed plan
    needs: int = 1  # distinct approvers that plan needs
    approvers: str = "anyone but the requester"  # who may approve, in words
    working: str | None = None  # "… is working on it" while the agent works

    @property
    def status(self) -> str:
        for row in reversed(self.rows):
            meta = row.get("meta") or {}
            if meta.get("outcome") in ("opened", "accepted") and meta.get("to"):
                return str(meta["to"])
        return str(self.case.get("status") or "NEW")

    @property
    def plan_hash(self) -> str | None:
        return None if self.plan is None else str(self.plan["plan_hash"])

    def of_plan(self, *events: str) -> list[TimelineEntry]:
        """The rows of ``events`` about the latest plan, since it was proposed (a plan proposed
        again after a resume starts afresh, even with the same hash)."""
        start = next((n for n in range(len(self.rows) - 1, -1, -1)
                      if self.rows[n]["event"] == "plan_ready"
                      and (self.rows[n].get("meta") or {}).get("outcome") == "accepted"), None)
        if start is None:
            return []
        return [row for row in self.rows[start:] if row["event"] in events
                and _facts(row).get("plan_hash", self.plan_hash) == self.plan_hash]


def latest_plan_hash(rows: Sequence[TimelineEntry]) -> str | None:
    """The hash of the plan the case's latest accepted ``plan_ready`` proposed."""
    for row in reversed(rows):
        meta = row.get("meta") or {}
        if row["event"] == "plan_ready" and meta.get("outcome") == "accepted":
            return str(meta.get("plan_hash") or "") or None
    return None


# -- the card --------------------------------------------------------------------------------


def card_message(state: CaseState) -> Message:
    """The card: at most ten blocks whatever the case (a plan of any length included)."""
    status, case = state.status, state.case
    mark = STATUS_MARK.get(status, "•")
    head = f"{mark} {status} · {case.get('severity')} · {case.get('title')}"
    blocks: list[Block] = [
        {"type": "header", "block_id": CARD_BLOCK,
         "text": {"type": "plain_text", "text": _cut(head, HEADER_LIMIT)}},
        _block("summary", section(_summary(state))),
        _block("happening", section(_fit("*What is happening*", _happening(state)))),
    ]
    if state.plan is not None:
        blocks.append(_block("plan", section(_plan(state))))
        blocks.append(_block("steps", section(_fit("*Steps*", _steps(state)))))
    verification = _verification(state)
    if verification:
        blocks.append(_block("verify", section(_fit("*Verification*", verification))))
    outcome = _outcome(state)
    if outcome:
        blocks.append(_block("outcome", section(outcome)))
    pins = _pins(state)
    if pins:
        blocks.append(_block("pins", section(_fit("*📌 Pinned*", pins))))
    blocks.append(_block("context", _footer(state)))
    text = f"{mark} Case {short_id(case['case_id'])}: {shown(case.get('title'), 150)} — {status}"
    return text, blocks


def _block(name: str, block: Block) -> Block:
    return {**block, "block_id": f"{CARD_BLOCK}_{name}"}


def _summary(state: CaseState) -> str:
    opened = next((row for row in state.rows if row["event"] == "case_opened"), None)
    line = f"*Case* `{short_id(state.case['case_id'])}` · *Status* {state.status} · " \
           f"*Severity* {state.case.get('severity')}"
    if opened is not None:
        line += f"\nOpened by {who(opened['actor'])} at {_at(opened)}"
    return line


def _happening(state: CaseState) -> list[str]:
    lines = _findings(state)
    alerts = [row for row in state.rows if row["event"] in ALERT_EVENTS]
    lines += [f"🔔 {_cut(text, LINE_LIMIT)}" for row in alerts[-LISTED:]
              if (text := alert_text({"event": row["event"], **_facts(row)}))]
    if not lines:
        lines = ["_the analysis is under way_" if state.status in ("NEW", "ANALYZING")
                 else "_nothing found yet_"]
    return lines


def _findings(state: CaseState) -> list[str]:
    """The latest findings, one line each; without any, why the analysis moved on."""
    found = [row for row in state.rows if row["event"] in FINDINGS_EVENTS]
    if not found:
        moved = [row for row in state.rows
                 if row["event"] == "analysis_done" and row.get("reason")]
        return [f"• {shown(moved[-1]['reason'], LINE_LIMIT)}"] if moved else []
    latest = found[-1]
    listed = _facts(latest).get("findings")
    if isinstance(listed, list) and listed:
        return [_finding_line(f) for f in listed[:LISTED] if isinstance(f, Mapping)]
    text = str(listed or latest.get("reason") or "no significant change")
    return [f"• {shown(line, LINE_LIMIT)}" for line in text.splitlines()
            if line.strip()][:LISTED]


def _finding_line(finding: Mapping[str, Any]) -> str:
    line = f"• {shown(finding.get('summary'), LINE_LIMIT)} " \
           f"_({float(finding.get('confidence') or 0):.0%})_"
    graph = link(finding.get("link"), "graph")
    if graph and len(graph) < 1000:
        line += f" {graph}"
    return line


def _plan(state: CaseState) -> str:
    assert state.plan is not None
    plan = state.plan["plan"]
    title = shown(plan.get("title") or "Change plan", 150)
    line = f"*Plan* {title} _(risk {float(plan.get('risk_score') or 0):g})_ " \
           f"`{str(state.plan_hash)[:12]}`\n{_gate(state)}"
    return line[:SECTION_LIMIT]


def _gate(state: CaseState) -> str:
    """Where the plan stands at the gate, with the quorum's progress."""
    decided = [row for row in state.of_plan("gate_approved", "gate_rejected", "gate_expired")
               if (row.get("meta") or {}).get("outcome") == "accepted"]
    if decided:
        row = decided[-1]
        if row["event"] == "gate_rejected":
            return f"⛔ Rejected by {who(row['actor'])} at {_at(row)}: " \
                   f"{shown(row.get('reason'), LINE_LIMIT)}"
        if row["event"] == "gate_expired":
            return f"⌛ Nobody decided in time: {shown(row.get('reason'), LINE_LIMIT)} " \
                   f"(at {_at(row)})"
        approvers = _facts(row).get("approvers") or [row["actor"]]
        return f"✅ Approved by {_people(approvers)} at {_at(row)}"
    so_far = _approvers_so_far(state)
    requester = state.plan.get("proposed_by") if state.plan else None
    progress = f"approvals {len(so_far)} of {state.needs}" + \
        (f": {_people(so_far)}" if so_far else "")
    waiting = "⏸️ *Waiting at the gate* —" if state.status == "WAIT_GATE" else "Gate:"
    return f"{waiting} {progress} · {escape(state.approvers)} may approve; " \
           f"requested by {who(requester)}"


def _approvers_so_far(state: CaseState) -> list[str]:
    yes = [row for row in state.of_plan("plan_approval")
           if (row.get("meta") or {}).get("outcome") == "note"]
    if not yes:
        return []
    return [str(a) for a in (yes[-1].get("meta") or {}).get("approvers") or [yes[-1]["actor"]]]


def _steps(state: CaseState) -> list[str]:
    """Each plan step with its latest attempt (✓ done, ✗ failed, ↻ retried, ▶ running,
    · not yet), then the rollback steps that ran."""
    assert state.plan is not None
    latest: dict[tuple[str, int], TimelineEntry] = {}
    for row in state.of_plan("step_result", "rollback_result"):
        facts = _facts(row)
        latest[(str(facts.get("phase", "step")), int(facts.get("step") or 0))] = row
    lines, running = [], state.status == "EXECUTING"
    for index, step in enumerate(state.plan["plan"].get("steps") or []):
        done = latest.get(("step", index))
        if done is not None:
            lines.append(_result_line(done))
            running = running and bool(_facts(done).get("ok"))
            continue
        mark, note = ("▶", " running…") if running else ("·", "")
        running = False
        lines.append(f"{mark} {index + 1}. `{shown(step.get('action'), 40)}`{note}")
    rollbacks = sorted((key, row) for key, row in latest.items() if key[0] != "step")
    lines += [f"↩ {_result_line(row)}" for _, row in rollbacks]
    return lines


def _result_line(row: TimelineEntry) -> str:
    facts = _facts(row)
    attempt, allowed = int(facts.get("attempt") or 1), int(facts.get("attempts_allowed") or 1)
    if facts.get("ok"):
        mark, extra = "✓", ""
    elif attempt < allowed:
        mark, extra = "↻", f" · attempt {attempt} of {allowed}"
    else:
        mark, extra = "✗", ""
    took = _duration(facts.get("duration_s"))
    return f"{mark} {shown(row.get('reason'), STEP_LIMIT)}{took}{extra}"


def _verification(state: CaseState) -> list[str]:
    readings = state.of_plan("verify_reading")
    concluded = state.of_plan("verify_result")
    if concluded:
        row = concluded[-1]
        passed = bool(_facts(row).get("passed"))
        verdict = "✅ Held" if passed else "❌ Failed"
        return [f"{verdict}: {shown(row.get('reason'), LINE_LIMIT)} "
                f"_(reading {_facts(row).get('reading', 1)}, {_at(row)})_"]
    if readings:
        facts = _facts(readings[-1])
        what = facts.get("waiting_for") or facts.get("reason") or "the verify block to hold"
        now = f"now {_number(facts.get('observed'))}" if facts.get("observed") is not None \
            else shown(facts.get("reason"), LINE_LIMIT)
        if facts.get("stand_in") and facts.get("observed") is not None:
            now = f"{now}, a stand-in reading"  # the reason says so itself
        return [f"🧪 Waiting for {shown(what, LINE_LIMIT)} ({now})",
                f"Reading {facts.get('reading', 1)} at {_at(readings[-1])} · next reading "
                f"{_clock(facts.get('next_reading_at'))} · *deadline* "
                f"{_clock(facts.get('deadline'))}"]
    if state.status == "VERIFYING":
        return ["🧪 The first reading is due"]
    return []


def _outcome(state: CaseState) -> str | None:
    if state.status not in ("CLOSED", "PARKED"):
        return None
    row = next(row for row in reversed(state.rows)
               if (row.get("meta") or {}).get("to") == state.status
               and (row.get("meta") or {}).get("outcome") == "accepted")
    why = f" — {shown(row.get('reason'), 1000)}" if row.get("reason") else ""
    return f"{STATUS_MARK[state.status]} *{state.status}* at {_at(row)} " \
           f"({row['event']} by {who(row['actor'])}){why}"


def _pins(state: CaseState) -> list[str]:
    pins = [row for row in state.rows if row["event"] == PINNED_EVENT]
    lines = [_pin_line(row) for row in pins[-LISTED:]]
    if len(pins) > LISTED:
        lines.append(f"_{len(pins)} pinned in all: `/case catchup` or the timeline_")
    return lines


def _pin_line(row: TimelineEntry) -> str:
    facts = _facts(row)
    said = shown(row.get("reason"), 160)  # what Slack's message said, in words (bot.pins)
    permalink = str(facts.get("permalink") or "")
    where = f" {link(permalink, 'open')}" if permalink.startswith("https://") else ""
    return f"• {who(facts.get('author') or 'someone')}: “{said}”{where}"


def _footer(state: CaseState) -> Block:
    elements = []
    if state.working:
        elements.append({"type": "mrkdwn", "text": f"⏳ {_cut(state.working, 200)}"})
    updated = f" · updated {_at(state.rows[-1])}" if state.rows else ""
    elements.append({"type": "mrkdwn",
                     "text": f"`/case catchup {short_id(state.case['case_id'])}` to catch up"
                             f"{updated}"})
    return {"type": "context", "elements": elements}


# -- what the thread is told -----------------------------------------------------------------


def outcome_post(payload: TransitionPayload) -> str | None:
    """The thread post of a move that asks for a human or ends the case (PARKED with why,
    CLOSED); None for every other move (the card shows it)."""
    to, event = payload["to"], payload["event"]
    case = f"Case `{short_id(payload['case_id'])}`"
    reason = shown(payload.get("reason") or "", 1000)
    if to == "CLOSED":
        return f"✅ {case} is CLOSED: {reason or 'done'} ({event} by {who(payload['actor'])})"
    if to != "PARKED":
        return None
    if event == "gate_rejected":
        why = f"plan rejected by {who(payload['actor'])}: {reason}"
    elif event == "exec_failed":
        why = f"the change failed — {reason}"
    elif event == "verify_failed":
        why = f"verification failed — {reason}"
    elif event == "gate_expired":
        why = f"nobody decided the plan in time ({reason}) — ask the agent for a fresh plan"
    else:
        why = f"{event} by {who(payload['actor'])}" + (f" — {reason}" if reason else "")
    return f"🅿️ {case} is PARKED: {why}. A person decides what happens next."


def unknown_outcome_post(payload: StepResultPayload) -> str | None:
    """The thread post of a step whose outcome nobody knows (its run finished after its lease
    ended): it asks a person to check the target its reason names; None for any other step."""
    if payload.get("refused") != "unknown_outcome":
        return None
    reason = shown(payload.get("reason") or "", 1000)
    return (f"❓ Case `{short_id(payload['case_id'])}`: {reason}. A person checks the target "
            "and records what happened; opsgate will not run the step again.")


# -- /case catchup ---------------------------------------------------------------------------


def catchup_message(state: CaseState) -> Message:
    """For someone joining late: where the case stands, what it waits on and whom, the last
    five events, and who approved (or rejected) what."""
    case, status = state.case, state.status
    title = f"{STATUS_MARK.get(status, '•')} Case `{short_id(case['case_id'])}` " \
            f"*{escape(case.get('title'))}* — {status} · {case.get('severity')}"
    recent = [_event_line(row) for row in state.rows[-CATCHUP_EVENTS:]]
    blocks = [section(title),
              section(f"*Waiting on* {waiting_on(state)}"),
              section(_fit(f"*Last {len(recent)} event(s)*", recent)),
              section(_fit("*Who decided what*", _decisions(state) or ["no decision yet"]))]
    pins = _pins(state)
    if pins:
        blocks.append(section(_fit("*📌 Pinned*", pins)))
    return f"Catch-up on case {short_id(case['case_id'])}: {status}", blocks


def waiting_on(state: CaseState) -> str:
    """What the case waits on, and whom, in one line."""
    status = state.status
    if status == "WAIT_GATE" and state.plan is not None:
        so_far = _approvers_so_far(state)
        more = max(state.needs - len(so_far), 1)
        return (f"*people*: {more} more approval(s) of plan "
                f"“{escape(state.plan['plan'].get('title'))}” from {escape(state.approvers)} "
                f"(not {who(state.plan.get('proposed_by'))}, who requested it)")
    if status == "PARKED":
        return "*a person*: the case is parked — decide what happens next"
    if status == "CLOSED":
        return "nothing: the case is closed"
    if status == "EXECUTING":
        return "*opsgate*: the approved plan is running"
    if status == "VERIFYING":
        lines = _verification(state)
        return "*opsgate*: verification" + (f" — {lines[0]}" if lines else "")
    return "*opsgate*: the analysis and the plan"


def _event_line(row: TimelineEntry) -> str:
    meta = row.get("meta") or {}
    move = f" {meta.get('from')} → {meta.get('to')}" \
        if meta.get("outcome") == "accepted" and meta.get("from") != meta.get("to") else ""
    reason = f" — {shown(row.get('reason'), 160)}" if row.get("reason") else ""
    return f"`{_at(row)}` *{row['event']}*{move} by {who(row['actor'])}{reason}"


def _decisions(state: CaseState) -> list[str]:
    lines = []
    for row in state.rows:
        meta, facts = row.get("meta") or {}, _facts(row)
        plan = f"`{str(meta.get('plan_hash') or facts.get('plan_hash') or '')[:12]}`"
        if row["event"] == "plan_approval" and meta.get("outcome") == "note":
            lines.append(f"👍 {who(row['actor'])} approved plan {plan} at {_at(row)} "
                         f"({meta.get('needs')} more needed then)")
        elif row["event"] == "gate_approved":
            lines.append(f"✅ {who(row['actor'])} approved plan {plan} at {_at(row)}; "
                         f"approved by {_people(facts.get('approvers') or [row['actor']])}")
        elif row["event"] == "gate_rejected" and meta.get("outcome") == "accepted":
            lines.append(f"⛔ {who(row['actor'])} rejected plan {plan} at {_at(row)}: "
                         f"{shown(row.get('reason'), 160)}")
        elif row["event"] == "gate_expired" and meta.get("outcome") == "accepted":
            lines.append(f"⌛ plan {plan} expired at {_at(row)}: "
                         f"{shown(row.get('reason'), 160)}")
    return lines


# -- text ------------------------------------------------------------------------------------


def _facts(row: TimelineEntry) -> Mapping[str, Any]:
    """What a row says besides the move: a note's context, or a move's own meta."""
    meta = row.get("meta") or {}
    found = meta.get("context")
    facts: dict[str, Any] = dict(found) if isinstance(found, Mapping) else {}
    if meta.get("plan_hash") and "plan_hash" not in facts:
        facts["plan_hash"] = meta["plan_hash"]
    return facts


MORE = 30  # room kept for "… and N more"


def _fit(title: str, lines: Iterable[str], limit: int = SECTION_LIMIT) -> str:
    """``title`` and as many whole ``lines`` as fit in ``limit`` characters; the rest counted."""
    listed = list(lines)
    text = title
    for kept, line in enumerate(listed):
        room = limit - (MORE if kept < len(listed) - 1 else 0)
        if len(text) + 1 + len(line) > room:
            return f"{text}\n… and {len(listed) - kept} more"
        text = f"{text}\n{line}"
    return text


def _cut(value: object, limit: int) -> str:
    """mrkdwn opsgate wrote (an alert's line, the working line) on one line, cut between words;
    text from outside is ``shown``."""
    return shortened(" ".join(str(value or "").split()), limit)


def _people(people: Iterable[object]) -> str:
    return ", ".join(who(person) for person in people)


def _at(row: TimelineEntry) -> str:
    return _clock(row.get("created_at"))


def _clock(moment: object) -> str:
    text = str(moment or "")
    with suppress(ValueError):
        return f"{datetime.fromisoformat(text).astimezone(UTC):%H:%M:%S} UTC"
    return text or "—"


def _duration(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return ""
    return f" · {seconds:.1f} s" if seconds < 90 else f" · {seconds / 60:.1f} min"


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)
