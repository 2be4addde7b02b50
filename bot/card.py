"""The case card and the catch-up, as Block Kit: pure functions of a case's state
(``bot.card_state.CaseState``: its ``CaseProgress`` and the approval policy's numbers), so any
render of the same state is the same message, and a render of a later state never shows less.

The card is one message per case, kept current in place: status and severity, what is
happening, the plan at the gate with the quorum's progress, steps as they run, verification
with its live reading and deadline, the outcome, pinned messages. The thread itself gets only
what asks for a human or records a decision (``outcome_post``: PARKED with why, CLOSED).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bot.blocks import Block, Message, section, short_id, timeline_line, who
from bot.card_state import (
    LISTED,
    CaseState,
    StepLine,
    alert_entries,
    attempt_mark,
    findings_entry,
    moved_on_reason,
    opened_entry,
    step_lines,
    waiting_reading,
)
from bot.event_words import event_words
from bot.ids import COMMAND
from bot.mrkdwn import drawn, escape, link, shown
from bot.people import Names
from bot.plan_words import fitted, risk_words, said_mrkdwn
from bot.when import slack_time
from core.alerts.text import shortened
from core.cases.progress import Pin, StepAttempt
from core.cases.timeline import Entry
from core.consumers.notifier_text import alert_text
from core.domain.messages import StepResultPayload, TransitionPayload
from core.domain.plans import PlanStep
from core.steps.sentences import step_sentence

CARD_BLOCK = "case_card"
"""The ``block_id`` of the card's first block; the card's other blocks start with it too."""
SECTION_LIMIT = 3000  # Slack: a section's text
HEADER_LIMIT = 150  # Slack: a header's plain text
LINE_LIMIT = 220  # one line on the card, so that a phone shows it in two or three
CAUSE_LIMIT = 1200  # the agent's findings: whole (the section holds 3000)
STEP_LIMIT = 110  # one step's result: twenty steps fit in one section
STEP_SAID = 150  # one step's sentence on the card
CATCHUP_EVENTS = 5

STATUS_MARK = {"NEW": "🆕", "ANALYZING": "🔎", "PLANNING": "📝", "WAIT_GATE": "⏸️",
               "EXECUTING": "⚙️", "VERIFYING": "🧪", "CLOSED": "✅", "PARKED": "🅿️"}
STEP_MARK = {"done": "✓", "failed": "✗", "retried": "↻", "running": "▶", "waiting": "·"}


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
    if state.progress.plan is not None:
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
    opened = opened_entry(state)
    line = f"*Case* `{short_id(state.case['case_id'])}` · *Status* {state.status} · " \
           f"*Severity* {state.case.get('severity')}"
    if opened is not None:
        line += f"\nOpened by {who(opened.actor)} at {_clock(opened.at)}"
    if state.touches:
        line += f"\n*Touches* {escape(state.touches)}"
    if state.last_change:
        line += f"\n*Last change* {_cut(escape(state.last_change), LINE_LIMIT)}"
    return line


def _happening(state: CaseState) -> list[str]:
    lines = _findings(state)
    lines += [f"🔔 {_cut(drawn(said), LINE_LIMIT)}" for entry in alert_entries(state)
              if (said := alert_text({"event": entry.event, **entry.facts}))]
    if not lines:
        lines = ["_the analysis is under way_" if state.status in ("NEW", "ANALYZING")
                 else "_nothing found yet_"]
    return lines


def _findings(state: CaseState) -> list[str]:
    """The latest findings, one line each; without any, why the analysis moved on."""
    latest = findings_entry(state)
    if latest is None:
        moved = moved_on_reason(state)
        return [f"• {shown(moved, LINE_LIMIT)}"] if moved else []
    listed = latest.facts.get("findings")
    if isinstance(listed, list) and listed:
        return [_finding_line(f) for f in listed[:LISTED] if isinstance(f, Mapping)]
    text = str(listed or latest.reason or "no significant change")
    # The agent's sentence, whole: a cause cut mid-sentence reads as another cause.
    return [f"• {shown(line, CAUSE_LIMIT)}" for line in text.splitlines()
            if line.strip()][:LISTED]


def _finding_line(finding: Mapping[str, Any]) -> str:
    line = f"• {shown(finding.get('summary'), LINE_LIMIT)} " \
           f"_({float(finding.get('confidence') or 0):.0%})_"
    graph = link(finding.get("link"), "graph")
    if graph and len(graph) < 1000:
        line += f" {graph}"
    return line


def _plan(state: CaseState) -> str:
    plan = state.progress.plan
    assert plan is not None
    title = shown(plan.title or "Change plan", 150)
    why = f": {escape(risk_words(plan.parsed))}" if plan.parsed is not None else ""
    line = f"*Plan* {title} _(risk {float(plan.risk_score or 0):g}{why})_ " \
           f"`{plan.plan_hash[:12]}`\n{_gate(state)}"
    return line[:SECTION_LIMIT]


def _gate(state: CaseState) -> str:
    """Where the plan stands at the gate (by its approval rows), with the quorum's progress."""
    gate = state.progress.gate
    if gate is not None and gate.state == "rejected":
        return f"⛔ Rejected by {who(gate.rejected_by)} at {_clock(gate.decided_at)}: " \
               f"{shown(gate.reason, LINE_LIMIT)}"
    if gate is not None and gate.state == "expired":
        return f"⌛ Nobody decided in time: {shown(gate.reason, LINE_LIMIT)} " \
               f"(at {_clock(gate.decided_at)})"
    if gate is not None and gate.state == "approved":
        return f"✅ Approved by {_people(gate.approvers)} at {_clock(gate.decided_at)}"
    so_far = state.yeses
    plan = state.progress.plan
    requester = plan.proposed_by if plan else None
    progress = f"approvals {len(so_far)} of {state.needs}" + \
        (f": {_people(so_far)}" if so_far else "")
    waiting = "⏸️ *Waiting at the gate* —" if state.status == "WAIT_GATE" else "Gate:"
    return f"{waiting} {progress} · {state.approvers} may approve; " \
           f"requested by {who(requester)}"


def _steps(state: CaseState) -> list[str]:
    """Each plan step in words with its latest attempt (✓ done, ✗ failed, ↻ retried, ▶
    running, · not yet), then the rollback steps that ran."""
    plan = state.progress.plan
    parsed = None if plan is None else plan.parsed
    steps = () if parsed is None else parsed.steps
    rollback = () if parsed is None else parsed.rollback
    lines = [_step_line(line, _said(steps, line.index)) for line in step_lines(state)]
    lines += [f"↩ {_result_line(attempt, _said(rollback, attempt.step))}"
              for attempt in state.progress.rollbacks]
    return lines


def _said(steps: tuple[PlanStep, ...], index: int) -> str | None:
    """Step ``index`` in its adapter's words (None when the plan has no such step)."""
    return said_mrkdwn(step_sentence(steps[index]), STEP_SAID) if 0 <= index < len(steps) \
        else None


def _step_line(line: StepLine, said: str | None) -> str:
    if line.attempt is not None:
        return _result_line(line.attempt, said)
    note = " running…" if line.mark == "running" else ""
    what = said or f"`{shown(line.action, 40)}`"
    return f"{STEP_MARK[line.mark]} {line.index + 1}. {what}{note}"


def _result_line(attempt: StepAttempt, said: str | None = None) -> str:
    mark = attempt_mark(attempt)
    extra = f" · attempt {attempt.attempt or 1} of {attempt.attempts_allowed or 1}" \
        if mark == "retried" else ""
    took = _duration(attempt.duration_s)
    if said is None:
        return f"{STEP_MARK[mark]} {shown(attempt.summary, STEP_LIMIT)}{took}{extra}"
    result = "done" if attempt.ok else shown(attempt.summary, STEP_LIMIT)
    return f"{STEP_MARK[mark]} {attempt.step + 1}. {said} — {result}{took}{extra}"


def _verification(state: CaseState) -> list[str]:
    verdict = state.progress.verdict
    if verdict is not None:
        held = "✅ Held" if verdict.passed else "❌ Failed"
        return [f"{held}: {shown(verdict.said, LINE_LIMIT)} "
                f"_(reading {verdict.reading}, {_clock(verdict.at)})_"]
    reading = waiting_reading(state)
    if reading is not None:
        what = reading.waiting_for or reading.reason or "the verify block to hold"
        now = f"now {_number(reading.observed)}" if reading.observed is not None \
            else shown(reading.reason, LINE_LIMIT)
        if reading.stand_in and reading.observed is not None:
            now = f"{now}, a stand-in reading"  # the reason says so itself
        return [f"🧪 Waiting for {shown(what, LINE_LIMIT)} ({now})",
                f"Reading {reading.reading} at {_clock(reading.at)} · next reading "
                f"{_clock(reading.next_reading_at)} · *deadline* "
                f"{_clock(reading.deadline)}"]
    if state.status == "VERIFYING":
        return ["🧪 The first reading is due"]
    return []


def _outcome(state: CaseState) -> str | None:
    entry = state.progress.outcome
    if entry is None:
        return None
    why = f" — {shown(entry.reason, 1000)}" if entry.reason else ""
    return f"{STATUS_MARK[state.status]} *{state.status}* at {_clock(entry.at)} " \
           f"({event_words(entry.event)} by {who(entry.actor)}){why}"


def _pins(state: CaseState) -> list[str]:
    pins = state.progress.pins
    lines = [_pin_line(pin) for pin in pins[-LISTED:]]
    if len(pins) > LISTED:
        lines.append(f"_{len(pins)} pinned in all: `/case catchup` or the timeline_")
    return lines


def _pin_line(pin: Pin) -> str:
    said = shown(pin.said, 160)  # what Slack's message said, in words (bot.pins)
    permalink = pin.permalink or ""
    where = f" {link(permalink, 'open')}" if permalink.startswith("https://") else ""
    return f"• {who(pin.author or 'someone')}: “{said}”{where}"


def _footer(state: CaseState) -> Block:
    elements = []
    if state.working:
        elements.append({"type": "mrkdwn", "text": f"⏳ {_cut(state.working, 200)}"})
    updated = f" · updated {_clock(state.entries[-1].at)}" if state.entries else ""
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
        return (f"✅ {case} is CLOSED: {reason or 'done'} "
                f"({event_words(event)} by {who(payload['actor'])})")
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
        why = f"{event_words(event)} by {who(payload['actor'])}" + \
            (f" — {reason}" if reason else "")
    resume = f"`{COMMAND} resume {short_id(str(payload['case_id']))} [what to try]`"
    return (f"🅿️ {case} is PARKED: {why}. A person decides what happens next: {resume}, or "
            "mention me here with what to try.")


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
    recent = [_event_line(entry, state.names) for entry in state.entries[-CATCHUP_EVENTS:]]
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
    status, plan = state.status, state.progress.plan
    if status == "WAIT_GATE" and plan is not None:
        return (f"*people*: {state.more_needed} more approval(s) of plan "
                f"“{escape(plan.title)}” from {state.approvers} "
                f"(not {who(plan.proposed_by)}, who requested it)")
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


def _event_line(entry: Entry, names: Names) -> str:
    return timeline_line(entry, _clock(entry.at), 160, names)


def _decisions(state: CaseState) -> list[str]:
    return [line for entry in state.entries if (line := _decision_line(entry))]


def _decision_line(entry: Entry) -> str | None:
    plan, at, by = f"`{entry.plan_named[:12]}`", _clock(entry.at), who(entry.actor)
    if entry.event == "plan_approval" and entry.noted:
        return f"👍 {by} approved plan {plan} at {at} ({entry.needs} more needed then)"
    if entry.event == "gate_approved":
        approvers = entry.facts.get("approvers") or [entry.actor]
        return f"✅ {by} approved plan {plan} at {at}; approved by {_people(approvers)}"
    if entry.event == "gate_rejected" and entry.accepted:
        return f"⛔ {by} rejected plan {plan} at {at}: {shown(entry.reason, 160)}"
    if entry.event == "gate_expired" and entry.accepted:
        return f"⌛ plan {plan} expired at {at}: {shown(entry.reason, 160)}"
    return None


# -- text ------------------------------------------------------------------------------------


MORE = 30  # room kept for "… and N more"


def _fit(title: str, lines: Iterable[str], limit: int = SECTION_LIMIT) -> str:
    """``title`` and as many whole ``lines`` as fit in ``limit`` characters; the rest counted
    (the card has no Details to point at)."""
    return fitted(title, lines, limit, where="", kept_for_more=MORE)


def _cut(value: object, limit: int) -> str:
    """mrkdwn opsgate wrote (an alert's line, the working line) on one line, cut between words;
    text from outside is ``shown``."""
    return shortened(" ".join(str(value or "").split()), limit)


def _people(people: Iterable[object]) -> str:
    return ", ".join(who(person) for person in people)


def _clock(moment: object) -> str:
    return slack_time(moment)


def _duration(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return ""
    return f" · {seconds:.1f} s" if seconds < 90 else f" · {seconds / 60:.1f} min"


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)
