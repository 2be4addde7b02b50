"""Block Kit builders: pure functions from cases, plans and timelines to ``(text, blocks)``.

``text`` is the notification and screen-reader fallback Slack requires beside blocks; blocks are
short sections that stay readable on a phone. Both are mrkdwn: every text that came from outside
(titles, reasons, plan steps, findings, names) goes through ``bot.mrkdwn``, so it pings nobody
and links nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.event_words import event_words
from bot.ids import COMMAND, REASON_BLOCK, REASON_INPUT, Action, Subcommand, View
from bot.mrkdwn import at_word, escape, shown
from bot.people import Names, as_is, mentions_in
from bot.plan_words import fitted, risk_words, said_mrkdwn
from bot.when import slack_time
from core.cases.timeline import Entry, entries_of
from core.domain.dry_run import DryRunReport
from core.domain.gate_rule import GateRule, gate_rule
from core.domain.plans import ParsedPlan, PlanStep, parsed_or_none
from core.domain.policy import NO_APPROVERS, ApprovalPolicy, PlanLike, number_words, plan_risk
from core.domain.verify import parse_verify
from core.domain.views import CaseView, TimelineEntry
from core.errors import InvalidPlan
from core.evidence.baseline import CheckReading
from core.library.render import evidence_text
from core.policy.judge import is_slack_group
from core.steps.sentences import check_sentence, duration, step_sentence

Block = dict[str, Any]
Message = tuple[str, list[Block]]

_SLACK_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_STATUS_MARK = {"NEW": "🆕", "ANALYZING": "🔎", "PLANNING": "📝", "WAIT_GATE": "⏸️",
                "EXECUTING": "⚙️", "VERIFYING": "🧪", "CLOSED": "✅", "PARKED": "🅿️"}
TIMELINE_ROWS = 15  # a phone screen or two; the REST API has the rest
REASON_SHOWN, TITLE_SHOWN = 200, 150  # characters of a row's reason, of a listed case's title


def who(actor: object) -> str:
    """A Slack user id as a mention, anyone else (a consumer, a REST caller) as text."""
    name = str(actor)
    return f"<@{name}>" if _SLACK_ID.match(name) else escape(name)


def short_id(case_id: object) -> str:
    return str(case_id)[:8]


def section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:3000]}]}


def plain(text: str) -> Message:
    """A one-section message (acknowledgements, refusals)."""
    return text, [section(text)]


# -- the plan message ------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanDecisionView:
    """What the plan message shows once the gate decided (or while it waits for a second yes)."""

    verdict: str  # approved | rejected | expired | pending
    by: Sequence[str]
    at: str  # ISO time
    reason: str | None = None
    needs: int = 0


STEP_SAID, CHECK_SAID = 240, 200  # characters of a step's sentence, of a check's, as read


def step_line(index: int, step: PlanStep) -> str:
    """"2. Restart deployment `shop/checkout` _(up to 60 s, retried once)_"."""
    retried = {0: "", 1: ", retried once"}.get(step.retry, f", retried up to {step.retry} times")
    return (f"{index}. {said_mrkdwn(step_sentence(step), STEP_SAID)} "
            f"_(up to {duration(step.timeout_s)}{retried})_")


def verify_lines(verify: object, readings: Sequence[CheckReading] = ()) -> list[str]:
    """Each check of the verify block as a sentence, with its reading now when there is one;
    a check that already holds is marked: it cannot show that the change worked."""
    try:
        block = parse_verify(verify)
    except InvalidPlan:
        return ["• a verify block that cannot be judged (see Details)"]
    now = {reading.index: reading for reading in readings}
    lines = []
    for n, check in enumerate(block.checks):
        line = f"• {said_mrkdwn(check_sentence(check), CHECK_SAID)}"
        reading = now.get(n)
        if reading is not None:
            line += _reading(reading)
        lines.append(line)
    if block.timeout_s:
        lines.append(f"_judged within {duration(block.timeout_s)} of the change_")
    return lines


def _reading(reading: CheckReading) -> str:
    stand_in = " (stand-in)" if reading.stand_in else ""
    if reading.holds:
        return (f"\n    ⚠️ *holds already*: {shown(reading.said, CHECK_SAID)}{stand_in} — it "
                "cannot show that the change worked")
    return f" — now {reading.value:g}{stand_in}"


def plan_message(case: CaseView, plan: PlanLike, plan_hash: str,
                 approval_id: str, requester: str, policy: ApprovalPolicy,
                 decision: PlanDecisionView | None = None, *,
                 readings: Sequence[CheckReading] = (), names: Names = as_is) -> Message:
    """The one message a proposed plan is: title, risk, steps, rollback and verify in words
    (each step as its adapter says it would run it; each check with its reading now, marked when
    it already holds), the ``Details`` button that shows the exact JSON and, until it is
    decided, the ``Approve`` and ``Reject`` buttons bound to ``approval_id``. A plan that does
    not meet the contract gets no buttons. ``names`` reads a person's id as their name."""
    parsed = parsed_or_none(plan)
    if parsed is None:
        return _unreadable_plan(case, plan_hash)
    policy = policy.at(case.get("components", ()), None)
    rule = gate_rule(policy, parsed, requester)  # Cedar asked once for who and how many
    risk, needed = plan_risk(parsed), rule.needed
    blocks = _plan_sections(case, parsed, plan_hash, requester, policy, risk, needed,
                            readings, names)
    blocks[2:2] = rule_sections(rule, policy)
    if decision is None or decision.verdict == "pending":
        if policy.nobody_named:
            blocks.append(section(f"⛔ *Nobody can approve this plan yet*: {NO_APPROVERS}. It "
                                  "waits at the gate until someone is named."))
        confirm = approve_confirm(parsed.title, risk, policy) if needed >= 2 else None
        blocks.append(_buttons(approval_id, confirm))
    else:
        blocks.append(_details_only(approval_id))
    if decision is not None:
        blocks.append(_decided(decision))
    return _plan_text(case, parsed.title, risk, decision, names), blocks


# -- the plan's dry run (its own section: the plan message's layout is plan_message's) ---------

DRY_RUN_MARKS = {"ok": "✅", "refused": "⛔", "not_checked": "❔"}


def dry_run_section(report: DryRunReport) -> Block:
    """What each step would do, read from its target when the plan was proposed: one line a
    step, what could not be checked said as such."""
    lines = "\n".join(f"{DRY_RUN_MARKS[line.verdict]} {escape(line.text)}"
                      for line in report.lines)
    return section(f"*Dry run* (read when the plan was proposed)\n{lines or '—'}")


def with_dry_run(message: Message, report: DryRunReport | None) -> Message:
    """A plan message with its dry run as its own section, above its buttons (last once the
    gate decided); unchanged when the proposal had no dry run."""
    if report is None:
        return message
    text, blocks = message
    at = next((n for n, block in enumerate(blocks) if block.get("type") == "actions"),
              len(blocks))
    return text, [*blocks[:at], dry_run_section(report), *blocks[at:]]


def _plan_sections(case: CaseView, parsed: ParsedPlan, plan_hash: str, requester: str,
                   policy: ApprovalPolicy, risk: float, needed: int,
                   readings: Sequence[CheckReading], names: Names) -> list[Block]:
    """The plan as read: header, case and risk, steps, rollback, verify, and its hash."""
    steps = [step_line(i, step) for i, step in enumerate(parsed.steps, 1)]
    rollback = [step_line(i, step) for i, step in enumerate(parsed.rollback, 1)]
    approvers = "one approver" if needed == 1 else f"{number_words(needed)} distinct approvers"
    title = at_word(" ".join(f"Plan: {parsed.title}".split()), 149)
    title = title if title == " ".join(f"Plan: {parsed.title}".split()) else f"{title}…"
    return [
        {"type": "header", "text": {"type": "plain_text", "text": title}},
        section(f"*Case* `{short_id(case['case_id'])}` {shown(case.get('title'), TITLE_SHOWN)}"
                f"\n*Risk* {risk:g}: {escape(risk_words(parsed))} — needs {approvers}; "
                f"requested by {who(requester)}"),
        section(fitted("*Steps*", steps)),
        section(fitted("*Rollback*", rollback or ["— (nothing to undo)"])),
        section(fitted("*Verify* (after the change)", verify_lines(parsed.verify, readings))),
        context(f"plan `{plan_hash[:12]}` · case version {case.get('version')} · "
                f"approvers: {mentions_in(escape(policy.describe_approvers()), names)}"),
    ]


def rule_sections(rule: GateRule, policy: ApprovalPolicy) -> list[Block]:
    """Whose system the plan changes and the rule it waits on, in words: the components and
    their owners, each step nobody owns (nobody may approve then), who may approve and how
    many by which policy, and any forbid that refuses everyone it does not exempt (a freeze).
    Nothing more while the default policy decides a plan that touches no component: the
    sections above say it."""
    if rule.default and not rule.touched and not rule.unowned:
        return []
    lines = []
    if rule.touched:
        lines.append("*Touches* " + ", ".join(
            f"{escape(t.component)} ({group_mention(t.owner, policy)}, {escape(t.lifecycle)})"
            for t in rule.touched))
    lines.append(f"*Who may approve* {rule_sentence(rule, policy)}")
    blocks = [section("\n".join(lines))]
    for sentence in rule.unowned:
        blocks.append(section(f"⛔ *Unowned*: {escape(sentence)}: nobody may approve this plan"))
    for refusing in rule.forbidden:
        why = escape(refusing.reason or "a policy refuses approvals of this plan")
        blocks.append(section(f"⛔ *{why}* (policy {escape(refusing.policy)}): only the people "
                              "it exempts may approve now"))
    return blocks


def rule_sentence(rule: GateRule, policy: ApprovalPolicy) -> str:
    """The rule as a sentence with its policies: "two of @payments-oncall, because payments-api
    is production and risk ≥ 0.7 — policy payments-prod-two-people" (the ``because`` is each
    deciding policy's ``@reason``)."""
    count = number_words(rule.needed)
    whom = " or ".join(group_mention(w, policy) for w in rule.who) or "nobody"
    reasons = [permit.reason for permit in policy.cedar.named(rule.policies) if permit.reason]
    because = f", because {escape('; '.join(reasons))}" if reasons else ""
    named = f" — policy {escape(', '.join(rule.policies))}" if rule.policies else ""
    return f"{count} of {whom}{because}{named}"


def group_mention(name: str, policy: ApprovalPolicy) -> str:
    """A group or person as Slack shows them: a Slack user group (or a catalog group that
    names one) as its mention, a person by their id as theirs, a catalog group by name."""
    group = policy.catalog().groups.get(name)
    slack = group.slack_group if group is not None else (name if is_slack_group(name) else None)
    if slack is not None:
        return f"<!subteam^{slack}>"
    return who(name) if _SLACK_ID.match(name) else f"@{escape(name)}"


def _plan_text(case: CaseView, title: str, risk: float,
               decision: PlanDecisionView | None, names: Names = as_is) -> str:
    """The notification text of the plan message, with its decision once there is one."""
    text = (f"Plan for case {short_id(case['case_id'])}: {shown(title, TITLE_SHOWN)} "
            f"(risk {risk:g})")
    if decision is not None and decision.verdict == "expired":
        return f"{text} — {escape(decision.reason or 'approval expired')}"
    if decision is not None and decision.verdict != "pending":
        by = ", ".join(names(person) for person in decision.by)
        return f"{text} — {decision.verdict} by {escape(by)}"
    return text


def _unreadable_plan(case: CaseView, plan_hash: str) -> Message:
    return plain(f"Plan `{plan_hash[:12]}` for case `{short_id(case['case_id'])}` does not meet "
                 "the ChangePlan schema: it cannot be approved or run.")


def _buttons(approval_id: str, confirm: Block | None = None) -> Block:
    approve: Block = {"type": "button", "action_id": Action.APPROVE, "style": "primary",
                      "value": approval_id, "text": {"type": "plain_text", "text": "Approve"}}
    if confirm is not None:
        approve["confirm"] = confirm
    return {"type": "actions", "block_id": "plan_decision", "elements": [
        approve,
        {"type": "button", "action_id": Action.REJECT, "style": "danger", "value": approval_id,
         "text": {"type": "plain_text", "text": "Reject"}},
        _details_button(approval_id),
    ]}


def _details_button(approval_id: str) -> Block:
    """The button that opens the plan's exact JSON (``bot.plan_words.details_modal``)."""
    return {"type": "button", "action_id": Action.DETAILS, "value": approval_id,
            "text": {"type": "plain_text", "text": "Details"}}


def _details_only(approval_id: str) -> Block:
    return {"type": "actions", "block_id": "plan_details",
            "elements": [_details_button(approval_id)]}


CONFIRM_TITLE, CONFIRM_TEXT = 100, 300  # Slack's limits on a confirmation dialog's texts


def approve_confirm(title: str, risk: float, policy: ApprovalPolicy) -> Block:
    """The dialog Slack shows before a high-risk plan's ``Approve`` click is sent: the plan's
    title and risk, and that the second yes runs it."""
    why = (f"two approvers from {policy.two_person_risk:g}" if policy.cedar.default
           else "its policy asks for more than one approver")
    rest = (f"” has risk {risk:g} ({why}). It runs in production as soon as enough distinct "
            "people approve it.")
    room = CONFIRM_TEXT - len("Plan “") - len(rest)
    shown = " ".join(title.split())
    shown = shown if len(shown) <= room else shown[:room - 1] + "…"
    return {"title": {"type": "plain_text", "text": "Approve a high-risk plan?"},
            "text": {"type": "plain_text", "text": f"Plan “{shown}{rest}"},
            "confirm": {"type": "plain_text", "text": "Approve"},
            "deny": {"type": "plain_text", "text": "Cancel"},
            "style": "danger"}


def _decided(decision: PlanDecisionView) -> Block:
    by = ", ".join(who(person) for person in decision.by)
    if decision.verdict == "approved":
        return section(f"✅ *Approved* by {by} at {decision.at}")
    if decision.verdict == "rejected":
        return section(f"⛔ *Rejected* by {by} at {decision.at}: {escape(decision.reason)}")
    if decision.verdict == "expired":
        why = escape(decision.reason or "approval expired")
        return section(f"⌛ *{why[:1].upper()}{why[1:]}* — ask the agent for a fresh plan "
                       f"_({decision.at})_")
    return context(f"👍 {len(decision.by)} of {len(decision.by) + decision.needs}: {by} · "
                   f"{decision.needs} more approval(s) needed")


def reject_modal(title: str | None, private_metadata: str) -> dict[str, Any]:
    """The modal the ``Reject`` button opens: the plan by its title, and one required
    reason."""
    which = f"plan “{shown(title, 120)}”" if title else "this plan"
    return {
        "type": "modal", "callback_id": View.REJECT_REASON,
        "private_metadata": private_metadata,
        "title": {"type": "plain_text", "text": "Reject plan"},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            section(f"Why is {which} rejected? The case parks with your reason."),
            {"type": "input", "block_id": REASON_BLOCK,
             "label": {"type": "plain_text", "text": "Reason"},
             "element": {"type": "plain_text_input", "action_id": REASON_INPUT,
                         "multiline": True, "min_length": 3, "max_length": 500}},
        ],
    }


# -- /case ------------------------------------------------------------------------------------


def case_status(case: CaseView) -> Message:
    mark = _STATUS_MARK.get(str(case["status"]), "•")
    text = (f"{mark} Case `{short_id(case['case_id'])}` *{escape(case['title'])}*\n"
            f"*Status* {case['status']} · *Severity* {case['severity']} · "
            f"*Version* {case['version']}")
    return f"Case {short_id(case['case_id'])}: {case['status']}", [
        section(text), context(f"id `{case['case_id']}` · updated "
                               f"{slack_time(case['updated_at'])}")]


def case_timeline(case: CaseView, rows: Sequence[TimelineEntry], names: Names = as_is, *,
                  total: int | None = None) -> Message:
    """The last ``TIMELINE_ROWS`` of ``rows`` (the timeline, or its tail of ``total`` rows)."""
    recent = rows[-TIMELINE_ROWS:]
    lines = []
    for entry in entries_of(recent):
        lines.append(timeline_line(entry, names=names))
    earlier = (len(rows) if total is None else total) - len(recent)
    more = [context(f"{earlier} earlier row(s) not shown")] if earlier > 0 else []
    return (f"Timeline of case {short_id(case['case_id'])}",
            [section(f"*Timeline of case* `{short_id(case['case_id'])}` "
                     f"{escape(case['title'])}"),
             *more, section("\n".join(lines) or "—")])


def timeline_line(entry: Entry, at: str | None = None, limit: int = REASON_SHOWN,
                  names: Names = as_is) -> str:
    """One timeline row in words: "07:00:01 *case opened* as NEW by @alice — why", "*plan
    proposed* PLANNING → WAIT_GATE by …"; people in its reason as mentions (Slack names
    them)."""
    reason = f" — {mentions_in(shown(entry.reason, limit), names)}" if entry.reason else ""
    return (f"{at or slack_time(entry.at)} *{event_words(entry.event, entry.outcome)}*"
            f"{move_words(entry)} by {who(entry.actor)}{reason}")


def move_words(entry: Entry) -> str:
    """" PLANNING → WAIT_GATE", " as NEW" for the first row (no state before it), or nothing
    (a note, a refusal)."""
    if entry.target and entry.source and entry.source != entry.target:
        return f" {escape(entry.source)} → {escape(entry.target)}"
    if entry.target and not entry.source:
        return f" as {escape(entry.target)}"
    return ""


def case_list(cases: Sequence[CaseView], status: str | None) -> Message:
    title = f"Cases in {status}" if status else "Latest cases"
    if not cases:
        return plain(f"{title}: none")
    lines = [f"{_STATUS_MARK.get(str(c['status']), '•')} `{short_id(c['case_id'])}` "
             f"{c['status']} · {shown(c['title'], TITLE_SHOWN)}" for c in cases]
    return title, [section(f"*{title}*"), section("\n".join(lines))]


def case_similar(evidence: Mapping[str, Any]) -> Message:
    """``Library.evidence_for``'s answer: the case's findings, similar past cases with what
    resolved them, relevant runbooks and the plan the most similar verified case was resolved
    with. The text fallback is ``evidence_text``."""
    case = f"`{short_id(evidence['case_id'])}` {escape(evidence.get('title'))}"
    findings = [f"• {escape(f.get('summary'))} "
                f"_(confidence {float(f.get('confidence', 0)):.0%})_"
                for f in evidence.get("findings") or []]
    similar = [f"{n}. *{escape(c.get('title'))}* (`{short_id(c.get('case_id'))}`)\n"
               f"    resolved by _{escape(c.get('resolved_by') or 'its plan')}_; "
               f"{'not verified' if c.get('stand_in') else 'verified'}: "
               f"{escape(c.get('verification') or '—')}"
               for n, c in enumerate(evidence.get("similar_cases") or [], 1)]
    runbooks = [f"• *{escape(r.get('title'))}* `{escape(r.get('path'))}`"
                for r in evidence.get("runbooks") or []]
    blocks = [section(f"*Evidence for case* {case}"),
              section("*Findings*\n" + ("\n".join(findings) or "none")),
              section("*Similar past cases*\n" + ("\n".join(similar) or "none")),
              section("*Relevant runbooks*\n" + ("\n".join(runbooks) or "none"))]
    best = evidence.get("best_plan")
    if best:
        blocks.append(context(f"The plan that resolved the most similar verified case "
                              f"`{short_id(best['case_id'])}`: "
                              f"{escape((best.get('plan') or {}).get('title'))}"))
    return escape(evidence_text(evidence)[:3000]), blocks


def help_message(note: str | None = None) -> Message:
    usage = "\n".join([
        f"`{COMMAND} {Subcommand.NEW} <title>` open a case with a thread in this channel",
        f"`{COMMAND} {Subcommand.STATUS} <id>` where a case stands (an id prefix is enough)",
        f"`{COMMAND} {Subcommand.TIMELINE} <id>` what happened to a case",
        f"`{COMMAND} {Subcommand.LIST} [status]` latest cases, optionally in one status",
        f"`{COMMAND} {Subcommand.SIMILAR} <id>` similar past cases (what resolved them) and "
        "relevant runbooks",
        f"`{COMMAND} {Subcommand.CATCHUP} <id>` catch up on a case: where it stands, what it "
        "waits on, the last events, who approved what",
        f"`{COMMAND} {Subcommand.RESUME} <id> [what to try]` re-open planning on a PARKED case "
        "with your suggestion (`retry` asks for the same plan again)",
        f"`{COMMAND} {Subcommand.HELP}` this help",
        "Mention me in a channel to open a case for that thread, or in a case's thread "
        "to continue it (in a PARKED case's thread, to re-plan with what you say).",
    ])
    blocks = [section(usage)]
    if note:
        blocks.insert(0, section(note))
    return (note or f"{COMMAND} help"), blocks


def ephemeral(message: Message) -> dict[str, Any]:
    """A slash command's ack body that only the asker sees."""
    text, blocks = message
    return {"response_type": "ephemeral", "text": text, "blocks": blocks}
