"""``opsgate trace``: the correlation id of one approval, followed through the gate transition,
its outbox messages, the consumers that took them, the gateway calls of the executor, verifier
and notifier, and the moves they made, in order; and its JSON log lines carry the same id."""

from __future__ import annotations

import io
import json
import logging
import uuid
from argparse import Namespace
from typing import Any

import pytest

from core.bootstrap import App, bootstrap
from core.cli.ops import run_trace
from core.domain.commands import ApprovePlan, OpenCase
from core.domain.fsm import CaseStatus
from core.errors import NotFound
from core.loop import InProcessLoop
from core.ops.trace import Hop, trace
from core.tracing import bound, configure_logging
from tests.support.loop import FAST_VERIFY, loop_settings

APPROVAL = "approval-7f3a"


@pytest.fixture
def app_options() -> dict[str, Any]:
    return FAST_VERIFY


def _approved_case(app: App) -> uuid.UUID:
    """Open a case, let the loop bring it to the gate, approve it under ``APPROVAL`` and let
    the loop finish it."""
    with InProcessLoop(app) as loop:
        reply = app.cases.open_case(OpenCase("5xx on checkout", "pagerduty", "SEV2",
                                             correlation_id="open-1"), "trace-open")
        case_id = uuid.UUID(reply.data()["case_id"])

        def status() -> str:
            return str(app.cases.get_case(case_id)["status"])

        assert loop.wait_for(lambda: status() == CaseStatus.WAIT_GATE, 30)
        plan = app.cases.proposed_plan(case_id)
        assert plan is not None
        app.cases.approve_plan(ApprovePlan(case_id, plan["plan_hash"], "lead",
                                           correlation_id=APPROVAL), "trace-approve").data()
        assert loop.wait_for(lambda: status() == CaseStatus.CLOSED, 30)
        assert loop.wait_for(lambda: loop.unpublished() == 0, 10)
    return case_id


def _first(hops: list[Hop], kind: str, **facts: object) -> int:
    for n, hop in enumerate(hops):
        if hop.kind == kind and all(hop.facts.get(k) == v for k, v in facts.items()):
            return n
    raise AssertionError(f"no {kind} hop with {facts} in:\n" +
                         "\n".join(hop.line() for hop in hops))


def test_the_trace_of_one_approval_shows_every_hop_in_order(app):
    case_id = _approved_case(app)
    hops = trace(app.engine, APPROVAL)
    order = [
        _first(hops, "timeline", event="gate_approved", **{"from": "WAIT_GATE"}),
        _first(hops, "outbox", topic="cmd.exec.run"),
        _first(hops, "inbox", consumer="executor"),
        _first(hops, "timeline", event="exec_done"),
        _first(hops, "outbox", topic="cmd.verify.run"),
        _first(hops, "inbox", consumer="verifier"),
        _first(hops, "timeline", event="verify_pass"),
    ]
    assert order == sorted(order)
    step_call = _first(hops, "ledger", actor="executor")
    assert order[1] < step_call < order[3]  # the step ran between the command and exec_done
    step_note = _first(hops, "timeline", event="step_result")
    assert step_call < step_note < order[3]
    verify_call = _first(hops, "ledger", tool="verify.evaluate")
    assert order[4] < verify_call < order[6]
    assert _first(hops, "ledger", tool="chat.post") > order[0]  # the notifier's posts
    cases = {hop.facts["case_id"] for hop in hops if hop.kind == "timeline"}
    assert cases == {str(case_id)}
    # The opening's correlation id is another path: none of its rows are in this one.
    assert all(hop.facts.get("event") != "case_opened" for hop in hops)
    assert _first(trace(app.engine, "open-1"), "timeline", event="case_opened") == 0


def test_the_trace_command_prints_the_path_and_refuses_an_unknown_id(sqlite_engine):
    app = bootstrap(loop_settings(), engine=sqlite_engine)
    try:
        _check_trace_command(app)
    finally:
        app.close()


def _check_trace_command(app: App) -> None:
    _approved_case(app)
    out = io.StringIO()
    assert run_trace(app, Namespace(correlation_id=APPROVAL, json=False), out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"trace {APPROVAL}: ")
    assert any("gate_approved WAIT_GATE -> EXECUTING by lead" in line for line in lines)
    assert any("handled by executor" in line for line in lines)
    assert any("message #" in line and "cmd.exec.run (published)" in line for line in lines)
    as_json = io.StringIO()
    run_trace(app, Namespace(correlation_id=APPROVAL, json=True), as_json)
    assert len(as_json.getvalue().splitlines()) == len(lines) - 1
    with pytest.raises(NotFound):
        run_trace(app, Namespace(correlation_id="never-seen", json=False), io.StringIO())


def test_json_logs_carry_the_bound_correlation_id(capsys):
    handler = configure_logging("json", "INFO")
    try:
        with bound("log-me-9"):
            logging.getLogger("core.test").info("case %s moved", "c1", extra={"case_id": "c1"})
        logging.getLogger("core.test").warning("outside")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines[0]["correlation_id"] == "log-me-9"
    assert lines[0]["message"] == "case c1 moved" and lines[0]["case_id"] == "c1"
    assert lines[0]["level"] == "info" and lines[0]["logger"] == "core.test"
    assert lines[1]["correlation_id"] == "-"
