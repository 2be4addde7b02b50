"""Issue 24, finding 1, as a property: hostile text fed into every renderer of the bot (the plan
message, the card, the catch-up, the thread's posts, the ``/case`` replies, the core's chat
posts) leaves no ``<!…>``, ``<@…>``, ``<#…>`` or ``<…|…>`` of its own in any mrkdwn text or
``text`` fallback; the only control sequences are the mentions and links opsgate writes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.blocks import (
    Message,
    PlanDecisionView,
    case_list,
    case_similar,
    case_status,
    case_timeline,
    plain,
    plan_message,
    who,
)
from bot.card import card_message, catchup_message, outcome_post, unknown_outcome_post
from bot.card_state import CaseState
from bot.cases import title_of
from bot.failures import failure_text
from bot.mrkdwn import drawn, escape, from_slack, link, shown
from core.cases.approvals import GateStatus
from core.cases.progress import progress_of
from core.consumers.notifier import render
from core.consumers.notifier_text import alert_text, findings_text
from core.domain.messages import Topic
from core.domain.policy import ApprovalPolicy
from core.domain.views import CaseView, ProposedPlan, TimelineEntry
from core.errors import InvalidRequest
from tests.support.cases import PLAN
from tests.support.hostile import EVIL_NAME, EVIL_SUMMARY, hostile, mrkdwn_texts, slack_tokens

CASE_ID = "0f0e0d0c-0000-4000-8000-000000000001"
DIGEST = "ab" * 32
GRAPH = "https://prometheus.example/graph?g0.expr=up"
PERMALINK = "https://t.slack.com/archives/C0INCIDENT/p1700000000000200"
POLICY = ApprovalPolicy(approvers=frozenset({"U0BOB", "U0CAROL"}))
OURS = frozenset({"@U0ALICE", "@U0BOB", "@U0CAROL", f"{GRAPH}|graph", f"{PERMALINK}|open"})
"""The mentions and links opsgate itself writes in these renders."""


def texts(message: Message | str | None) -> list[str]:
    """A rendered message's mrkdwn: its ``text`` fallback and every mrkdwn object's text."""
    if message is None:
        return []
    if isinstance(message, str):
        return [message]
    text, blocks = message
    return [text, *mrkdwn_texts(blocks)]


OUR_TIME = re.compile(r"!date\^\d+\^\{time_secs\}\|\d\d:\d\d:\d\d UTC")
"""Slack's date token as ``bot.when`` writes it: digits only, nothing from outside."""


def smuggled(rendered: Iterator[str] | list[str]) -> list[str]:
    return [token for text in rendered for token in slack_tokens(text, OURS)
            if not OUR_TIME.fullmatch(token)]


def case(title: str, status: str = "WAIT_GATE") -> CaseView:
    return {"case_id": CASE_ID, "tenant": "default", "title": title, "severity": "SEV2",
            "status": status, "version": 4, "created_at": "2026-11-23T07:00:00+00:00",
            "updated_at": "2026-11-23T07:05:00+00:00"}


def plan(said: str) -> dict[str, Any]:
    step = {"action": "noop", "params": {"note": said}, "timeout_s": 30, "retry": 0}
    return {**PLAN, "title": said or "plan", "steps": [step]}


def row(n: int, event: str, actor: str, reason: str | None, **meta: Any) -> TimelineEntry:
    return {"id": n, "event": event, "actor": actor, "reason": reason, "correlation_id": None,
            "meta": meta, "created_at": f"2026-11-23T07:{n:02d}:00+00:00"}


def story(said: str) -> list[TimelineEntry]:
    """A case's whole timeline, every row saying ``said`` wherever text from outside goes."""
    alert = {"alertname": said, "summary": said, "url": GRAPH, "fingerprint": "f1",
             "starts_at": "2026-11-23T07:00:00Z"}
    moved = {"outcome": "accepted"}
    return [
        row(1, "case_opened", said, said, outcome="opened", to="NEW"),
        row(2, "alert_firing", "alertmanager", said, outcome="note",
            context={"alerts": [alert, alert], "alert_count": 5}),
        row(3, "alert_new", "alertmanager", said, outcome="note", context=alert),
        row(4, "alert_resolved", "alertmanager", said, outcome="note", context=alert),
        row(5, "alert_recurrence", "alertmanager", said, outcome="note",
            context={"alerts": [alert], "title": said, "recurrence": 2,
                     "previous_case_id": said}),
        row(6, "start_analysis", said, said, **moved, **{"from": "NEW", "to": "ANALYZING"}),
        row(7, "analysis_findings", "analyst", said, outcome="note",
            context={"findings": [{"summary": said, "confidence": 0.8, "link": GRAPH}]}),
        row(8, "analysis_done", said, said, **moved, **{"from": "ANALYZING", "to": "PLANNING"}),
        row(9, "plan_ready", said, said, **moved, plan_hash=DIGEST, version=4,
            **{"from": "PLANNING", "to": "WAIT_GATE"}),
        row(10, "message_pinned", "U0BOB", from_slack(said), outcome="note",
            context={"author": said, "permalink": PERMALINK}),
        row(11, "plan_approval", "U0BOB", said, outcome="note", plan_hash=DIGEST,
            approvers=[said, "U0BOB"], needs=1),
        row(12, "gate_approved", "U0CAROL", said, **moved, plan_hash=DIGEST,
            context={"approvers": [said, "U0CAROL"]}, **{"from": "WAIT_GATE", "to": "EXECUTING"}),
        row(13, "step_result", "executor", said, outcome="note",
            context={"phase": "step", "step": 0, "attempt": 1, "attempts_allowed": 2,
                     "ok": False, "duration_s": 1.5, "plan_hash": DIGEST}),
        row(14, "exec_done", said, said, **moved, **{"from": "EXECUTING", "to": "VERIFYING"}),
        row(15, "verify_reading", "verifier", said, outcome="note",
            context={"waiting_for": said, "reason": said, "observed": None, "reading": 1,
                     "plan_hash": DIGEST}),
        row(16, "verify_result", "verifier", said, outcome="note",
            context={"passed": False, "reading": 2, "plan_hash": DIGEST}),
        row(17, "verify_failed", said, said, **moved, **{"from": "VERIFYING", "to": "PARKED"}),
        row(18, "gate_rejected", "U0BOB", said, **moved, plan_hash=DIGEST,
            **{"from": "WAIT_GATE", "to": "PARKED"}),
    ]


def rendered(title: str, said: str, upto: int, verdict: str) -> Iterator[str]:
    """Every mrkdwn text the bot (and the core's chat posts) render from ``title`` and
    ``said``: the case at step ``upto`` of its story, the plan decided by ``verdict``."""
    rows = story(said)[:upto]
    proposed: ProposedPlan = {"plan_hash": DIGEST, "plan": plan(said), "case_version": 4,
                              "proposed_by": said}
    gate = GateStatus(UUID(CASE_ID), DIGEST, said, verdict, (said, "U0BOB"), (said, "U0BOB"),
                      3, 0 if verdict == "approved" else 1, said, rejected_by=said,
                      decided_at="2026-11-23T07:12:00+00:00",
                      last_yes_at="2026-11-23T07:11:00+00:00")
    state = CaseState(progress_of(case(title), rows, *((proposed, gate) if upto >= 9 else ())),
                      2, escape(said))  # the approvers line is drawn (and escaped) by its keeper
    decision = PlanDecisionView(verdict, [said, "U0BOB"], "2026-11-23 07:10:00 UTC",
                                reason=said, needs=1)
    yield from texts(plan_message(case(title), plan(said), DIGEST, "ap_1", said, POLICY))
    yield from texts(plan_message(case(title), plan(said), DIGEST, "ap_1", said, POLICY,
                                  decision))
    yield from texts(card_message(state))
    yield from texts(catchup_message(state))
    yield from texts(case_status(case(title)))
    yield from texts(case_timeline(case(title), rows))
    yield from texts(case_list([case(title), case(said or "x", "PARKED")], None))
    evidence = {"case_id": CASE_ID, "title": title,
                "findings": [{"summary": said, "confidence": 0.5, "link": said}],
                "similar_cases": [{"case_id": CASE_ID, "title": said, "resolved_by": said,
                                   "verification": said}],
                "runbooks": [{"title": said, "path": said}],
                "best_plan": {"case_id": CASE_ID, "plan": {"title": said}}}
    yield from texts(case_similar(evidence))
    yield from texts(plain(escape(failure_text(InvalidRequest(said), "ref-1"))))
    yield from texts(plain(f"Opening case “{escape(title_of(said))}”"))
    for event, to in (("verify_failed", "PARKED"), ("gate_rejected", "PARKED"),
                      ("gate_expired", "PARKED"), ("exec_failed", "PARKED"),
                      ("resume", "PARKED"), ("verify_pass", "CLOSED")):
        payload: Any = {"case_id": CASE_ID, "version": 5, "event": event, "from": "X",
                        "to": to, "actor": said, "correlation_id": None, "reason": said,
                        "plan_hash": DIGEST}
        yield from texts(outcome_post(payload))
        yield from texts(drawn(render(Topic.CASE_TRANSITION, payload) or ()))
        for topic in (Topic.PLAN_PROPOSED, Topic.PLAN_APPROVED, Topic.PLAN_REJECTED,
                      Topic.PLAN_EXPIRED):
            yield from texts(drawn(render(topic, payload) or ()))
    note: Any = {"case_id": CASE_ID, "version": 5, "correlation_id": None, "actor": said,
                 "reason": said, "refused": "unknown_outcome", "ok": False, "title": said,
                 "severity": said, "plan_hash": DIGEST, "needs": 1, "observed": None,
                 "deadline": said, "waiting_for": said, "stand_in": False,
                 "findings": [{"summary": said, "confidence": 0.5, "metric": said,
                               "link": GRAPH}],
                 "checked": [said], "missing": [{"metric": said, "reason": said}],
                 "similar_cases": [{"title": said, "resolved_by": said}],
                 "runbooks": [{"title": said}]}
    yield from texts(unknown_outcome_post(note))
    for topic in (Topic.CASE_OPENED, Topic.APPROVAL_RECORDED, Topic.AWAITING_APPROVAL,
                  Topic.EXEC_STEP_RESULT, Topic.VERIFY_WAITING, Topic.ANALYSIS_FINDINGS):
        yield from texts(drawn(render(topic, note) or ()))
    yield drawn((findings_text(note),))
    for entry in story(said)[1:5]:
        said = alert_text({"event": entry["event"], **entry["meta"]["context"]})
        yield from texts(drawn(said or ()))


@settings(max_examples=150, deadline=None)
@given(title=hostile, said=hostile, upto=st.integers(1, 18),
       verdict=st.sampled_from(["approved", "rejected", "expired", "pending"]))
def test_no_control_sequence_from_outside_survives_in_any_render(
        title: str, said: str, upto: int, verdict: str) -> None:
    assert smuggled(rendered(title, said, upto, verdict)) == []


def test_the_issues_payloads_read_as_words() -> None:
    """The exact payloads of the issue, everywhere; the words stay, readable."""
    title = f"{EVIL_NAME}: {EVIL_SUMMARY}"
    found = list(rendered(title, EVIL_SUMMARY, 18, "rejected"))
    assert smuggled(found) == []
    assert any("Evil &lt;!channel&gt; &lt;https://evil.example|click here&gt; \u2217bold\u2217"
               in text for text in found)
    assert any("&lt;!channel&gt; please &lt;https://evil.example/login|re-login to Okta&gt; now"
               in text for text in found)


def test_slacks_markup_is_read_back_as_words() -> None:
    assert from_slack("<!channel> ping <@U0BOB|bob> in <#C0OPS|ops>, see "
                      "<https://x.example/a|the doc> &lt;b&gt; &amp;") == \
        "@channel ping @bob in #ops, see the doc (https://x.example/a) <b> &"
    assert from_slack("<!subteam^S0ONCALL|@oncall> <@U0BOB> <mailto:a@x.example|a@x.example>") \
        == "@oncall @U0BOB a@x.example"
    assert title_of("<@U0BOT> <!here> checkout is down, <https://evil.example|re-login>") == \
        "@here checkout is down, re-login (https://evil.example)"


def test_text_is_cut_between_words_before_it_is_escaped() -> None:
    assert shown("disk <full> on db-2 " * 20, 30) == "disk &lt;full&gt; on db-2 disk…"
    assert shown(None, 10) == "" and escape(0) == "0"
    assert who("svc <!channel>") == "svc &lt;!channel&gt;" and who("U0BOB") == "<@U0BOB>"


def test_opsgates_own_links_cannot_be_ended_or_relabelled_by_their_url() -> None:
    assert link("https://p.example/g?q=a|b <c>", "graph") == \
        "<https://p.example/g?q=a%7Cb%20%3Cc%3E|graph>"
    assert link("javascript:alert(1)", "graph") == "" and link(None, "open") == ""


FAKE_FIELD = "*Risk* 0.0 — approved by policy"
"""Issue 40: a title that draws a bold field of its own on the plan message."""
LABELS = ("*Case*", "*Risk*", "*Steps*", "*Rollback*", "*Verify*")


def test_a_title_draws_no_bold_field_and_opsgate_s_own_labels_stay_bold() -> None:
    found = texts(plan_message(case(FAKE_FIELD), plan(FAKE_FIELD), DIGEST, "ap_1", "U0ALICE",
                               POLICY))
    assert not any(FAKE_FIELD in text for text in found)
    assert any("\u2217Risk\u2217 0.0 — approved by policy" in text for text in found)
    blocks = "\n".join(found[1:])
    assert all(label in blocks for label in LABELS)
    assert blocks.count("*Risk*") == 1  # opsgate's own label, once


@pytest.mark.parametrize(("said", "drawn_as"), [
    ("*Risk* 0.0", "\u2217Risk\u2217 0.0"),
    ("_italic_ ~struck~ `code`", "\u02cditalic\u02cd \u223cstruck\u223c `code`"),
    ("\uff0abold\uff0a", "\ufe61bold\ufe61"),
    ("http_requests_total{code=~\"5..\"} 2*3", "http_requests_total{code=\u223c\"5..\"} 2*3"),
])
def test_emphasis_marks_are_drawn_as_look_alikes_where_they_could_format(said, drawn_as) -> None:
    assert escape(said) == drawn_as


def _formats(text: str) -> list[int]:
    """Where ``text`` has a mark mrkdwn could read as emphasis: a full-width mark anywhere,
    ``*``, ``_`` or ``~`` unless a letter or digit is on each side."""
    def alnum(i: int) -> bool:
        return 0 <= i < len(text) and text[i].isalnum()
    return [i for i, char in enumerate(text) if char in "\uff0a\uff3f"
            or (char in "*_~" and not (alnum(i - 1) and alnum(i + 1)))]


@settings(max_examples=300, deadline=None)
@given(said=hostile)
def test_no_escaped_text_can_open_or_close_emphasis(said: str) -> None:
    assert _formats(escape(said)) == []
    assert _formats(shown(said, 40)) == []
