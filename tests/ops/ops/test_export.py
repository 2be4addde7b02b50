"""``opsgate export``: a case's postmortem in Markdown, with its timeline, plan, approvals, step
results, verification and model usage; the case named by id or an unambiguous prefix."""

from __future__ import annotations

import io
from argparse import Namespace
from datetime import UTC, datetime
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import Engine, insert

from core.api.statuses import reply_status
from core.bootstrap import bootstrap
from core.chat import PINNED_EVENT
from core.cli.ops import run_export
from core.db.tables import ops_case
from core.domain.commands import NoteCase, TransitionCase
from core.errors import InvalidRequest, NotFound
from core.ops.export import export_case
from core.settings import Settings
from tests.support.cases import (
    APPROVER,
    PLAN,
    PLAN_HASH,
    REQUESTER,
    E,
    S,
    case_in,
    case_service,
    command,
    key,
    open_case,
)
from tests.support.hostile import (
    EVIL_NAME,
    EVIL_SUMMARY,
    hostile,
    markdown_heading,
    markdown_smuggled,
)
from tests.support.metrics import STAND_IN_METRICS


def closed_case(service) -> UUID:
    """A case through the whole FSM, with the notes the consumers and the agent write."""
    case_id = case_in(service, S.EXECUTING)
    step = {"phase": "step", "step": 0, "attempt": 1, "action": "noop", "ok": True,
            "duration_s": 0.25, "plan_hash": PLAN_HASH}
    service.note(NoteCase(case_id, "step_result", "executor", reason="step 1 (noop): done",
                          meta=step), key()).data()
    service.note(NoteCase(case_id, "agent_usage", "agent", reason="2 model calls",
                          meta={"model": "gpt-4o-mini", "model_calls": 2, "tokens_in": 1200,
                                "tokens_out": 300}), key()).data()
    service.note(NoteCase(case_id, "agent_usage", "agent", reason="1 model call",
                          meta={"model": "gpt-4o-mini", "model_calls": 1, "tokens_in": 500,
                                "tokens_out": 80}), key()).data()
    assert reply_status(service.transition(command(case_id, E.EXEC_DONE), key())) == 200
    service.note(NoteCase(case_id, "verify_result", "verifier", reason="error_rate 0.001 < 0.01",
                          meta={"passed": True, "observed": 0.001}), key()).data()
    done = TransitionCase(case_id, E.VERIFY_PASS, actor="verifier", reason="the check passed",
                          correlation_id="verify-corr")
    assert reply_status(service.transition(done, key())) == 200
    return case_id


def test_the_postmortem_has_every_section_with_the_case_facts(service, engine):
    case_id = closed_case(service)
    markdown = export_case(engine, case_id)
    assert markdown.startswith("# Postmortem: p95 latency spike on checkout\n")
    assert f"- **Case:** `{case_id}`" in markdown
    assert "**Status:** CLOSED (version 6)" in markdown
    assert ("**Path:** NEW → ANALYZING → PLANNING → WAIT_GATE → EXECUTING → VERIFYING → "
            "CLOSED") in markdown
    assert "| VERIFYING → CLOSED | the check passed | `verify-corr` |" in markdown
    sections = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert sections == ["## Timeline", "## Plan", "## Approvals", "## Step results",
                        "## Verification", "## Model usage"]
    assert f"| `gate_approved` | {APPROVER} | WAIT_GATE → EXECUTING |" in markdown
    assert f"### {PLAN['title']}" in markdown and f"`{PLAN_HASH}`" in markdown
    assert f"**Proposed by:** {REQUESTER}" in markdown
    assert "| 1 | `noop` | `{}` | 30 | 0 |" in markdown
    assert f"| {APPROVER} | approved | `{PLAN_HASH[:12]}` |" in markdown
    assert "| step | 1 | 1 | `noop` | ok | 0.25 | step 1 (noop): done |" in markdown
    assert "passed — error_rate 0.001 < 0.01 (observed 0.001)" in markdown
    assert "`verify_pass` → CLOSED" in markdown
    assert "| `gpt-4o-mini` | 3 | 1700 | 380 |" in markdown


def test_the_plan_names_who_proposed_it_and_who_asked(service, engine):
    """The planner proposes the plan for the person who opened the case: the postmortem names
    the planner as the proposer (the plan_ready row's actor) and the person as the requester."""
    case_id = case_in(service, S.PLANNING)
    proposed = command(case_id, E.PLAN_READY, actor="planner", requester=REQUESTER)
    assert reply_status(service.transition(proposed, key())) == 200
    markdown = export_case(engine, case_id)
    assert (f"- **Hash:** `{PLAN_HASH}` · **Proposed by:** planner at case version 3 · "
            f"**Requested by:** {REQUESTER} · **Risk:** 0.2") in markdown


def test_pinned_messages_are_in_the_timeline(service, engine):
    case_id = case_in(service, S.WAIT_GATE)
    link = "https://acme.slack.com/archives/C0INC/p1700000000000200?thread_ts=1.1&cid=C0INC"
    service.note(NoteCase(case_id, PINNED_EVENT, "U0BOB", reason="the WAL | disk is full",
                          meta={"author": "U0ALICE", "permalink": link}), key()).data()
    markdown = export_case(engine, case_id)
    assert (f"| `{PINNED_EVENT}` | U0BOB | (note) | 📌 pinned: U0ALICE said “the WAL \\| disk "
            f"is full” ([message]({link})) |") in markdown


def test_a_case_without_plan_or_usage_says_so(service, engine):
    case_id = case_in(service, S.ANALYZING)
    markdown = export_case(engine, case_id)
    for absent in ("No plan was proposed.", "No approval or rejection was recorded.",
                   "No step ran.", "Not verified.", "No model usage was noted."):
        assert absent in markdown


def test_a_case_is_found_by_id_or_unambiguous_prefix(service, engine):
    case_id = case_in(service, S.NEW)
    assert service.find_case_id(str(case_id)) == case_id
    assert service.find_case_id(str(case_id)[:8]) == case_id
    assert service.find_case_id(str(case_id)[:8].upper()) == case_id
    with pytest.raises(InvalidRequest, match="at least 4"):
        service.find_case_id("ab")
    with pytest.raises(InvalidRequest):
        service.find_case_id("not-hex!")
    with pytest.raises(NotFound):
        service.find_case_id("ffffffffffff" if not str(case_id).startswith("f") else "000000000000")


def test_an_ambiguous_prefix_is_refused(service, engine):
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for case_id in ("abcd1234-0000-4000-8000-000000000001",
                        "abcd9876-0000-4000-8000-000000000002"):
            conn.execute(insert(ops_case).values(
                id=UUID(case_id), tenant="default", title="twin", severity="SEV3",
                status="NEW", version=0, created_at=now, updated_at=now))
    with pytest.raises(InvalidRequest, match="several cases"):
        service.find_case_id("abcd")
    assert service.find_case_id("abcd98") == UUID("abcd9876-0000-4000-8000-000000000002")


def test_the_command_writes_the_file(service, engine, tmp_path):
    case_id = closed_case(service)
    app = bootstrap(Settings(static_metrics=STAND_IN_METRICS,
                             _env_file=None, redis_url=None), engine=engine)
    try:
        target = tmp_path / "pm.md"
        out = io.StringIO()
        assert run_export(app, Namespace(case=str(case_id)[:6], output=str(target)), out) == 0
        assert target.read_text(encoding="utf-8") == export_case(engine, case_id)
        printed = io.StringIO()
        run_export(app, Namespace(case=str(case_id), output=None), printed)
        assert printed.getvalue() == export_case(engine, case_id)
    finally:
        app.close()


PERMALINK = "https://acme.slack.com/archives/C0INC/p1700000000000200"


def hostile_case(service, title: str, said: str) -> UUID:
    """A case whose title, notes, pinned message, step result, plan title, model name and
    rejection all say ``said`` (or ``title``)."""
    case_id = open_case(service, title)
    for event in (E.START_ANALYSIS, E.ANALYSIS_DONE):
        assert reply_status(service.transition(command(case_id, event, reason=said), key())) \
            == 200
    plan = {**PLAN, "title": said or "plan", "steps": [{**PLAN["steps"][0],
                                                          "params": {"note": said}}]}
    assert reply_status(service.transition(
        command(case_id, E.PLAN_READY, plan=plan, reason=said), key())) == 200
    service.note(NoteCase(case_id, PINNED_EVENT, "U0BOB", reason=said or "-",
                          meta={"author": said, "permalink": PERMALINK}), key()).data()
    service.note(NoteCase(case_id, "step_result", "executor", reason=said or "-",
                          meta={"phase": said, "step": 0, "action": said, "ok": False}),
                 key()).data()
    service.note(NoteCase(case_id, "agent_usage", "agent", reason="1 model call",
                          meta={"model": said, "model_calls": 1}), key()).data()
    assert reply_status(service.transition(command(
        case_id, E.GATE_REJECTED, plan_hash=plan_hash_of(plan), actor=APPROVER,
        reason=said or "no"), key())) == 200
    return case_id


def plan_hash_of(plan: dict) -> str:
    from core.domain.plans import plan_hash

    return plan_hash(plan)


def test_an_alerts_words_link_nowhere_in_the_postmortem(service, engine):
    """Issue 24, finding 1, in ``opsgate export``: the issue's payloads, and a Markdown link and
    raw HTML besides, read as written and make no link."""
    title = f"{EVIL_NAME}: {EVIL_SUMMARY}"
    said = f"{EVIL_SUMMARY} [re-login](https://evil.example/login) <a href=\"https://evil.example\">"
    markdown = export_case(engine, hostile_case(service, title, said))
    assert markdown_smuggled(markdown, frozenset({PERMALINK})) == []
    assert markdown_heading(markdown) == f"Postmortem: {title}"
    assert "\\<https://evil.example/login|re-login to Okta>" in markdown


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(title=hostile, said=hostile)
def test_no_text_from_outside_becomes_a_link_or_markup_in_the_postmortem(
        sqlite_engine: Engine, title: str, said: str) -> None:
    title = " ".join(title.split())[:200] or "t"
    markdown = export_case(sqlite_engine, hostile_case(case_service(sqlite_engine), title, said))
    assert markdown_smuggled(markdown, frozenset({PERMALINK})) == []
    assert markdown_heading(markdown) == f"Postmortem: {title}"


def test_people_are_named_as_the_catalog_names_them(service, engine):
    """The command names each person by the catalog's ``slack.com/user-id``; an actor the
    catalog does not know (a service, a consumer) reads as written."""
    from core.catalog.model import Catalog, User
    from core.cli.ops import people_of

    people = people_of(Catalog.of([], [], [User("approver-person", APPROVER, (), "Alice Example",
                                                 "people.yaml")]))
    markdown = export_case(engine, closed_case(service), name=people)
    assert "| `gate_approved` | Alice Example | WAIT_GATE → EXECUTING |" in markdown
    assert "| Alice Example | approved |" in markdown and f"| {APPROVER} |" not in markdown
    assert "| `verify_pass` | verifier |" in markdown
