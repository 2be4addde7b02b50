"""``opsgate reconcile``: one test per kind of injected inconsistency (a call stuck past its
lease, an outbox row left unpublished, a published message no consumer recorded, a dead letter,
a case whose status disagrees with its timeline, an expired session lock), the safe repairs, and
a clean run that reports none."""

from __future__ import annotations

import io
import subprocess
from argparse import Namespace
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

from sqlalchemy import Engine, insert, select, update

from core.bootstrap import bootstrap
from core.cli.ops import run_reconcile
from core.db.database import make_engine
from core.db.tables import ops_case, outbox, session_lock, tool_call_ledger
from core.domain.commands import NoteCase, OpenCase
from core.gateway.ledger import Intent, Ledger
from core.gateway.model import Outcome, ToolCall
from core.loop import InProcessLoop
from core.messaging import inbox
from core.messaging.bus import RedisStreamsBus
from core.messaging.consumer import HELD
from core.messaging.envelope import Envelope
from core.migrate import upgrade_engine
from core.ops.reconcile import Reconciler
from core.settings import Settings
from tests.support.cases import S, case_in
from tests.support.loop import loop_settings
from tests.support.metrics import STAND_IN_METRICS
from tests.support.processes import clean_env, command

LONG_AGO = datetime.now(UTC) - timedelta(hours=1)


def reconciler(engine: Engine, bus: RedisStreamsBus | None = None) -> Reconciler:
    return Reconciler(engine, outbox_bound_s=300, bus=bus)


def kinds(engine: Engine, **kwargs: object) -> list[str]:
    return [f.kind for f in reconciler(engine).run(**kwargs).findings]  # type: ignore[arg-type]


def stuck_call(engine: Engine, tool: str) -> str:
    """A claim taken an hour ago with a 30 s lease, never completed (its worker died)."""
    call = ToolCall(tool, {"n": 1}, "executor", f"case:{uuid4()}")
    intent = Intent(key=uuid4().hex, call=call, args_hash="h", owner="dead-worker", fence=None,
                    idempotent=False, lease_s=30)
    assert Ledger(engine, clock=lambda: LONG_AGO).claim(intent).outcome == "claimed"
    return intent.key


def ledger_state(engine: Engine, key: str) -> str:
    with engine.connect() as conn:
        return str(conn.execute(select(tool_call_ledger.c.state)
                                .where(tool_call_ledger.c.key == key)).scalar_one())


def test_a_clean_store_reports_nothing(service, engine):
    case_in(service, S.CLOSED)
    case_in(service, S.PARKED)
    report = reconciler(engine).run(repair=True)
    assert report.clean and report.findings == []


def test_a_call_stuck_past_its_lease_is_found_and_left_alone_unless_safe(engine):
    risky = stuck_call(engine, "step.script.exec")
    safe = stuck_call(engine, "step.noop")
    found = reconciler(engine).run()
    assert [f.kind for f in found.findings] == ["stuck_call", "stuck_call"]
    assert all(f.repaired is None for f in found.findings)
    repaired = reconciler(engine).run(repair=True)
    by_subject = {f.subject: f for f in repaired.findings}
    assert by_subject[f"call {safe[:16]}"].repaired is not None
    assert by_subject[f"call {risky[:16]}"].repaired is None
    assert "check the target system" in by_subject[f"call {risky[:16]}"].advice
    assert ledger_state(engine, safe) == "released"
    assert ledger_state(engine, risky) == "in_progress"
    assert kinds(engine) == ["stuck_call"]  # the risky one stays until a person decides


def test_a_step_that_ran_without_its_result_on_the_timeline_is_found(service, engine):
    case_id = case_in(service, S.EXECUTING)
    call = ToolCall("step.noop", {}, "executor", f"case:{case_id}", business_key="b")
    intent = Intent(key=uuid4().hex, call=call, args_hash="h", owner="executor-1", fence=None,
                    idempotent=True, lease_s=30)
    ledger = Ledger(engine, clock=lambda: LONG_AGO)
    assert ledger.claim(intent).outcome == "claimed"
    assert ledger.complete(intent.key, "executor-1", Outcome(result={"ok": True}))
    [finding] = reconciler(engine).run(repair=True).findings
    assert finding.kind == "unrecorded_result" and finding.subject == f"case {case_id}"
    assert "1 finished step call(s), the timeline 0 step result(s)" in finding.detail
    assert finding.repaired is None
    service.note(NoteCase(case_id, "step_result", "executor", reason="step 1 (noop): ok",
                          meta={"ok": True}), "noted-late").data()
    assert reconciler(engine).run().clean


def test_a_closed_loop_leaves_nothing_to_reconcile(sqlite_engine):
    app = bootstrap(loop_settings(auto_approve="noop_only"), engine=sqlite_engine)
    try:
        with InProcessLoop(app) as loop:
            reply = app.cases.open_case(OpenCase("5xx on checkout", "pagerduty"), "loop-1")
            case_id = UUID(reply.data()["case_id"])
            assert loop.wait_for(
                lambda: app.cases.get_case(case_id)["status"] == S.CLOSED, 30)
            assert loop.wait_for(lambda: loop.unpublished() == 0, 10)
    finally:
        app.close()
    later = datetime.now(UTC) + timedelta(hours=1)  # every call and row is past every bound
    report = Reconciler(sqlite_engine, outbox_bound_s=300, clock=lambda: later).run()
    assert report.findings == []


def _stale_row(engine: Engine, topic: str = "cmd.exec.run") -> int:
    with engine.begin() as conn:
        return int(conn.execute(insert(outbox).values(
            topic=topic, key=str(uuid4()), payload={"case_id": "x", "version": 1},
            created_at=LONG_AGO).returning(outbox.c.id)).scalar_one())


def test_an_outbox_row_unpublished_past_its_bound_is_found_and_republished(engine,
                                                                            redis_client,
                                                                            redis_prefix):
    row_id = _stale_row(engine)
    fresh = _stale_row(engine)
    with engine.begin() as conn:  # a young row is the relay's business, not a finding
        conn.execute(update(outbox).where(outbox.c.id == fresh)
                     .values(created_at=datetime.now(UTC)))
    assert kinds(engine) == ["stale_outbox"]
    without_bus = reconciler(engine).run(repair=True)
    assert without_bus.findings[0].repaired is None
    bus = RedisStreamsBus(redis_client, prefix=redis_prefix)
    report = reconciler(engine, bus).run(repair=True)
    assert [(f.subject, f.repaired) for f in report.findings] == [
        (f"message #{row_id}", "re-published to the bus")]
    entries = redis_client.xrange(bus.stream("cmd.exec.run"))
    assert [Envelope.from_fields({k.decode(): v.decode() for k, v in fields.items()}).message_id
            for _, fields in entries] == [row_id, fresh]
    # Published is not delivered: written an hour ago, it is named until its consumer has it.
    assert kinds(engine) == ["undelivered"]
    with engine.begin() as conn:
        inbox.mark(conn, "executor", row_id)
    assert reconciler(engine).run().clean


def test_a_published_message_its_consumer_never_recorded_is_found_and_sent_again(
        engine, redis_client, redis_prefix):
    """Accepted by the bus is not delivered (a Redis restarted without its data forgets it):
    reconcile reports the message by who has not recorded it, and --repair sends it again."""
    row_id = _stale_row(engine)
    with engine.begin() as conn:
        conn.execute(update(outbox).where(outbox.c.id == row_id)
                     .values(published_at=LONG_AGO, attempts=1))
    [finding] = reconciler(engine).run().findings
    assert finding.kind == "undelivered" and finding.subject == f"message #{row_id}"
    assert "not recorded by executor" in finding.detail and finding.repaired is None
    bus = RedisStreamsBus(redis_client, prefix=redis_prefix)
    report = reconciler(engine, bus).run(repair=True)
    assert [(f.subject, f.repaired) for f in report.findings] == [
        (f"message #{row_id}", "re-published to the bus")]
    entries = redis_client.xrange(bus.stream("cmd.exec.run"))
    assert [Envelope.from_fields({k.decode(): v.decode() for k, v in fields.items()}).message_id
            for _, fields in entries] == [row_id]
    with engine.begin() as conn:
        inbox.mark(conn, "executor", row_id)
    assert reconciler(engine).run().clean


def test_a_dead_letter_is_found_with_how_to_requeue_it(engine):
    with engine.begin() as conn:
        inbox.bury(conn, "executor", Envelope(41, "cmd.exec.run", "case-1", {}),
                   "RuntimeError: boom", 4)
    report = reconciler(engine).run(repair=True)
    [finding] = report.findings
    assert finding.kind == "dead_letter" and finding.repaired is None
    assert "executor gave up on message #41" in finding.detail
    assert "opsgate outbox dead --requeue" in finding.advice


def test_a_post_held_for_want_of_slack_is_named_as_held_with_how_to_send_it(engine):
    with engine.begin() as conn:
        inbox.bury(conn, "notifier", Envelope(42, "evt.plan.proposed.v1", "case-1", {}),
                   f"{HELD}Slack is not configured (SLACK_BOT_TOKEN)", 1)
    [finding] = reconciler(engine).run(repair=True).findings
    assert finding.kind == "held_post" and finding.repaired is None
    assert "notifier holds message #42" in finding.detail
    assert "Slack is not configured" in finding.detail
    assert finding.advice.startswith("set SLACK_BOT_TOKEN")


def test_a_case_whose_status_disagrees_with_its_timeline_is_found(service, engine):
    case_id = case_in(service, S.ANALYZING)
    case_in(service, S.CLOSED)
    with engine.begin() as conn:  # a write that bypassed the case service
        conn.execute(update(ops_case).where(ops_case.c.id == case_id).values(status="CLOSED"))
    [finding] = reconciler(engine).run(repair=True).findings
    assert finding.kind == "status_mismatch" and finding.subject == f"case {case_id}"
    assert "status CLOSED v1, but its timeline folds to ANALYZING after 1" in finding.detail
    with engine.begin() as conn:
        conn.execute(update(ops_case).where(ops_case.c.id == case_id)
                     .values(status="ANALYZING", version=3))
    [version] = reconciler(engine).run().findings
    assert "status ANALYZING v3" in version.detail


def test_an_expired_session_lock_is_found_and_dropped(engine):
    with engine.begin() as conn:
        conn.execute(insert(session_lock).values(session_id="case:abc", owner="gone",
                                                 lease_until=LONG_AGO))
    assert kinds(engine) == ["expired_lock"]
    [finding] = reconciler(engine).run(repair=True).findings
    assert finding.repaired == "expired lock dropped"
    assert reconciler(engine).run().clean


def test_the_command_exits_1_on_findings_and_0_when_clean(sqlite_engine):
    app = bootstrap(Settings(static_metrics=STAND_IN_METRICS,
                             _env_file=None, redis_url=None), engine=sqlite_engine)
    try:
        out = io.StringIO()
        args = Namespace(repair=False, outbox_bound_s=None, json=False)
        assert run_reconcile(app, args, out) == 0
        assert out.getvalue().startswith("reconcile: clean")
        _stale_row(sqlite_engine)
        out = io.StringIO()
        assert run_reconcile(app, args, out) == 1
        assert out.getvalue().splitlines()[-1] == "reconcile: 1 finding(s), 0 repaired"
    finally:
        app.close()


def test_opsgate_reconcile_in_a_subprocess_exits_1_on_a_finding(tmp_path):
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    engine = make_engine(url)
    upgrade_engine(engine)
    _stale_row(engine)
    engine.dispose()
    result = subprocess.run(command("reconcile", "--database-url", url, "--json"),
                            env=clean_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert '"clean": false' in result.stdout and '"kind": "stale_outbox"' in result.stdout
