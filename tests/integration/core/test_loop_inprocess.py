"""The real consumers in the in-process loop on SQLite (the embedded default): an opened case
reaches CLOSED with nobody calling the API; a plan the policy does not let approve itself waits
for a person; a step that cannot run is rolled back and the case parks."""

from __future__ import annotations

from uuid import UUID

import pytest

from core.bootstrap import bootstrap
from core.domain.commands import ApprovePlan, OpenCase
from core.domain.fsm import CaseStatus
from core.loop import InProcessLoop
from core.settings import Settings
from tests.support.cases import APPROVERS
from tests.support.metrics import STAND_IN_METRICS
from tests.support.scripts import runbook_script

S = CaseStatus
FINAL = (S.CLOSED, S.PARKED)


@pytest.fixture
def make_app(sqlite_engine):
    made = []

    def make(**settings):
        # The template plans' windows after the change (60-300 s) pass in 1.2-6 s.
        fast = {"verify_time_scale": 0.02, "verify_poll_s": 0.3,
                "approvers": sorted(APPROVERS), **settings}
        app = bootstrap(Settings(static_metrics=STAND_IN_METRICS,
                                 database_url=str(sqlite_engine.url), **fast),
                        engine=sqlite_engine)
        made.append(app)
        return app

    yield make
    for app in made:
        app.gateway.close()


def _open(app, title: str) -> UUID:
    reply = app.cases.open_case(OpenCase(title=title, actor="pagerduty", severity="SEV2"),
                                f"open-{title}")
    return UUID(reply.data()["case_id"])


def _status(app, case_id: UUID) -> str:
    return str(app.cases.get_case(case_id)["status"])


def _events(app, case_id: UUID) -> list[str]:
    return [row["event"] for row in app.cases.timeline(case_id)]


def test_an_opened_case_reaches_closed_with_no_hand_on_it(make_app):
    app = make_app(auto_approve="noop_only")
    with InProcessLoop(app) as loop:
        case_id = _open(app, "checkout p95 latency over 2 s")
        assert loop.wait_for(lambda: _status(app, case_id) in FINAL, 30)
        assert loop.wait_for(lambda: loop.unpublished() == 0, 10)
    assert _status(app, case_id) == S.CLOSED
    events = _events(app, case_id)
    assert "verify_reading" in events  # the template's window after the change was waited for
    assert [event for event in events if event != "verify_reading"] == [
        "case_opened", "start_analysis", "analysis_done", "plan_ready", "gate_approved",
        "step_result", "exec_done", "verify_result", "verify_pass"]
    posts = app.chat.thread(str(case_id))
    assert posts[0].startswith("Case opened by pagerduty")
    assert any("approved by gatekeeper" in post for post in posts)
    assert sum(post.startswith("Verifying plan") for post in posts) == 1


def test_a_plan_waits_for_a_person_then_runs(make_app):
    app = make_app(auto_approve="off")
    with InProcessLoop(app) as loop:
        case_id = _open(app, "checkout p95 latency over 2 s")
        assert loop.wait_for(lambda: "awaiting_approval" in _events(app, case_id), 30)
        assert _status(app, case_id) == S.WAIT_GATE
        plan = app.cases.proposed_plan(case_id)
        assert plan is not None
        approved = app.cases.approve_plan(ApprovePlan(case_id, plan["plan_hash"], "alice"),
                                          f"approve-{case_id}")
        assert approved.data()["status"] == S.EXECUTING
        assert loop.wait_for(lambda: _status(app, case_id) in FINAL, 30)
    assert _status(app, case_id) == S.CLOSED


def test_a_step_that_fails_is_rolled_back_and_the_case_parks(make_app, monkeypatch, tmp_path):
    # script.restart's step runs an allowed restart-service that exits 1 (a script off the
    # allow-list never reaches the gate: its dry run refuses it, tests/integration/cases).
    allowed = runbook_script(monkeypatch, tmp_path / "bin", exit_code=1)
    app = make_app(auto_approve="off", **allowed)
    with InProcessLoop(app) as loop:
        case_id = _open(app, "payments worker hung")
        assert loop.wait_for(lambda: _status(app, case_id) == S.WAIT_GATE
                             and "awaiting_approval" in _events(app, case_id), 30)
        plan = app.cases.proposed_plan(case_id)
        app.cases.approve_plan(ApprovePlan(case_id, plan["plan_hash"], "alice"),
                               f"approve-{case_id}").data()
        assert loop.wait_for(lambda: _status(app, case_id) in FINAL, 30)
    assert _status(app, case_id) == S.PARKED
    events = _events(app, case_id)
    assert events[-3:] == ["step_result", "rollback_result", "exec_failed"]
