"""One run of one scenario through the real product: a scratch SQLite database (migrated once,
copied per run), the case service, the gateway, the analyst reading the scenario's recorded
series, the library holding its past verified cases, its runbooks, and the agent planner driving
the contestant model through the real graph; the commands the case service writes reach them
through the outbox relay and consumer runners of the embedded default. What the run left
behind is ``Observed``."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.language_models import BaseChatModel
from sqlalchemy import Engine, select

from agent.eval.grades import Observed
from agent.eval.scenarios import Scenario, resolve_plan, runbook_file, within
from agent.eval.series import with_stand_in, write_recorded
from agent.eval.world import EvalWorld, record_changes, world_settings
from agent.planner import AgentPlanner
from agent.runner import Agent, TurnResult
from agent.tools import ACTOR
from core.analysis.store import write_findings
from core.bootstrap import App, bootstrap
from core.cases.timeline import entries_of
from core.changes import ChangeIntake, ChangeStore
from core.consumers.analyst import Analyst
from core.db.database import make_engine, transaction
from core.db.tables import tool_call_ledger
from core.domain.commands import ApprovePlan, NoteCase, OpenCase, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.plans import plan_hash
from core.gateway.keys import session_of
from core.investigate.templates import measuring
from core.library.runbooks import runbooks_folder
from core.messaging.bus import InProcessBus
from core.messaging.consumer import ConsumerRunner
from core.messaging.inbox import dead_letters
from core.messaging.relay import OutboxRelay
from core.migrate import upgrade_engine
from core.settings import Settings

SHIPPED_RUNBOOKS = "docs/runbooks"  # the product's own, then the scenario's
REQUESTER = "oncall@example"  # who opens the case; the planner proposes on their behalf
PAST_APPROVERS = ("lead@example", "second@example")  # who approved the past verified cases
ModelFactory = Callable[[Scenario, UUID], BaseChatModel]


class RecordingAgent(Agent):
    """The agent, keeping its turn's result and how long it took: the model's final words and
    its latency are graded."""

    last: TurnResult | None = None
    seconds: float = 0.0

    def run_turn(self, case_id: UUID, text: str | None, **kwargs: Any) -> TurnResult:
        started = time.perf_counter()
        try:
            self.last = super().run_turn(case_id, text, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started
        return self.last


class Scratch:
    """A folder with a migrated SQLite database to copy for each run; a run writes only in its
    own folder (``within``, checked before each write)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.template = root / "migrated.sqlite"
        engine = make_engine(f"sqlite:///{self.template}")
        try:
            upgrade_engine(engine)
        finally:
            engine.dispose()
        self._runs = 0

    @contextmanager
    def run_folder(self) -> Iterator[Path]:
        self._runs += 1
        folder = within(self.root, self.root / f"run-{self._runs}")
        folder.mkdir()
        shutil.copyfile(self.template, within(folder, folder / "opsgate.sqlite"))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def scratch() -> Iterator[Scratch]:
    with tempfile.TemporaryDirectory(prefix="opsgate-eval-") as root:
        yield Scratch(Path(root))


def run_scenario(scenario: Scenario, folder: Path, model: ModelFactory,
                 place: Scratch, world: EvalWorld) -> Observed:
    """Run ``scenario`` (from the scenario ``folder``) once with a fresh ``model``, its looks
    reading ``world``."""
    with place.run_folder() as work:
        engine = make_engine(f"sqlite:///{work / 'opsgate.sqlite'}")
        try:
            return _run(scenario, folder, model, work, engine, world)
        finally:
            engine.dispose()


def _run(scenario: Scenario, folder: Path, model: ModelFactory, work: Path,
         engine: Engine, world: EvalWorld) -> Observed:
    write_recorded(work / "series", scenario.name, scenario.series)
    where = {"prometheus_url": None, **world_settings(world, scenario, work)}
    settings = Settings(_env_file=None, database_url=f"sqlite:///{work / 'opsgate.sqlite'}",
                        runbooks_dir=str(_runbooks(scenario, folder, work)),
                        series_dir=str(work / "series"), redis_url=None, auto_approve="off",
                        approvers=list(PAST_APPROVERS), mcp_servers=None, **where)
    settings = with_stand_in(settings, scenario.series)
    app = bootstrap(settings, engine=engine)
    # The evaluation grades the model's planning without the dry run before the gate: the
    # scenarios' answer plans name runbook scripts (scale-deployment, config-rollback) and
    # template targets (prod/app-canary) their recorded worlds do not hold, which the dry run
    # would refuse (docs/eval.md).
    app.cases.dry_run = None
    record_changes(ChangeIntake(ChangeStore(engine), app.catalog.current), scenario,
                   world.origin)
    for past in scenario.past_cases:
        _past_case(app, past.title, resolve_plan(past.plan) or {}, past.finding,
                   past.verification, None if scenario.service is None else scenario.service.name)
    case_id = _open(app, scenario)
    agent = RecordingAgent(app, model=model(scenario, case_id), lock_wait_s=1.0)
    bus = InProcessBus()  # the embedded default's bus: the relay delivers what the FSM wrote
    for consumer in (Analyst(app), AgentPlanner(app, agent)):
        bus.subscribe(consumer.topics, ConsumerRunner(engine, consumer))
    try:
        OutboxRelay(engine, bus).drain()  # analysis, then planning, then nothing is due
    finally:
        agent.close()
    dead = [f"{row['consumer']}: {row['error'][:200]}" for row in dead_letters(engine)]
    return observe(app, scenario.name, case_id, agent, dead[0] if dead else None)


def _runbooks(scenario: Scenario, folder: Path, work: Path) -> Path:
    """The run's runbooks folder: the product's, then the scenario's (read from its folder)."""
    target = within(work, work / "runbooks")
    target.mkdir(parents=True, exist_ok=True)
    for book in runbooks_folder(SHIPPED_RUNBOOKS).glob("*.md"):
        shutil.copyfile(book, within(target, target / book.name))
    for name in scenario.runbooks:
        shutil.copyfile(runbook_file(folder, name), within(target, target / f"{name}.md"))
    return target


def _key() -> str:
    return uuid.uuid4().hex


def _open(app: App, scenario: Scenario) -> UUID:
    """The scenario's case, naming its service when the run's catalog has it (as an alert's
    labels name it): the component whose series its plan's checks read."""
    report = scenario.report
    service = None if scenario.service is None else scenario.service.name
    components = (service,) if service in app.catalog.current().components else ()
    opened = app.cases.open_case(OpenCase(title=report.title, actor=REQUESTER,
                                          severity=report.severity,
                                          components=tuple(c for c in components if c)), _key())
    case_id = UUID(opened.data()["case_id"])
    for message in report.thread:
        app.cases.note(NoteCase(case_id, "thread_message", message.by, reason=message.text),
                       _key()).data()
    app.cases.transition(TransitionCase(case_id, CaseEvent.START_ANALYSIS, actor=REQUESTER),
                         _key()).data()
    return case_id


def _past_case(app: App, title: str, plan: dict[str, Any], finding: str | None,
               verification: str, service: str | None = None) -> None:
    """A case run to CLOSED by people: findings, the plan approved at the gate by as many
    approvers as its risk needs (``approve_plan``, as people approve), its verification, read
    from the series of the scenario's ``service`` (its plan's checks made to select them)."""
    components: tuple[str, ...] = (
        (service,) if service is not None and service in app.catalog.current().components
        else ())
    scopes = app.cases.gate.metric_scope(components)
    if app.cases.promql is not None and scopes:
        plan = measuring(plan, scopes[0])
    opened = app.cases.open_case(OpenCase(title=title, actor=REQUESTER,
                                          components=components),
                                 _key())
    case_id = UUID(opened.data()["case_id"])
    for event, given in ((CaseEvent.START_ANALYSIS, None), (CaseEvent.ANALYSIS_DONE, None),
                         (CaseEvent.PLAN_READY, plan)):
        app.cases.transition(TransitionCase(case_id, event, actor=REQUESTER, plan=given),
                             _key()).data()
    for approver in PAST_APPROVERS:
        if app.cases.get_case(case_id)["status"] != CaseStatus.WAIT_GATE:
            break
        app.cases.approve_plan(ApprovePlan(case_id, plan_hash(plan), approver), _key()).data()
    app.cases.transition(TransitionCase(case_id, CaseEvent.EXEC_DONE, actor="executor"),
                         _key()).data()
    if finding is not None:
        with transaction(app.engine) as conn:
            write_findings(conn, case_id, 2, [{"metric": finding.split()[0],
                                               "summary": finding}])
    app.cases.note(NoteCase(case_id, "verify_result", "verifier", reason=verification,
                            meta={"state": "held", "passed": True, "series_read": True}),
                   _key()).data()
    app.cases.transition(TransitionCase(case_id, CaseEvent.VERIFY_PASS, actor="verifier"),
                         _key()).data()
    app.library.index_case(case_id)


def observe(app: App, scenario: str, case_id: UUID, agent: RecordingAgent,
            error: str | None) -> Observed:
    """What the run left on the case (``error``: a delivery that went to the dead letters)."""
    turn = agent.last
    timeline = app.cases.timeline(case_id)
    usage = [entry.context for entry in entries_of(timeline) if entry.event == "agent_usage"]
    tools: dict[str, int] = {}
    for facts in usage:
        for name, count in (facts.get("tools") or {}).items():
            tools[name] = tools.get(name, 0) + int(count)
    stored = app.cases.proposed_plan(case_id)
    plan = None if stored is None else stored["plan"]
    words = [str(row["reason"] or "") for row in timeline
             if row["actor"] == ACTOR and row["event"] in ("findings", "agent_update")]
    words += [turn.reply if turn else "", str((plan or {}).get("title", ""))]
    return Observed(
        scenario=scenario, status=str(app.cases.get_case(case_id)["status"]), plan=plan,
        words="\n".join(words), outcome=turn.outcome if turn else "no turn",
        model_calls=sum(int(u.get("model_calls", 0)) for u in usage),
        tokens_in=sum(int(u.get("tokens_in", 0)) for u in usage),
        tokens_out=sum(int(u.get("tokens_out", 0)) for u in usage),
        invalid_plans=tools.get("invalid_plans", 0),
        malformed_calls=tools.get("malformed_calls", 0),
        refused=tuple(str(row["reason"]) for row in timeline if row["event"] == "agent_refused"),
        approvals=sum(row["event"] == CaseEvent.GATE_APPROVED for row in timeline),
        seconds=agent.seconds, error=error, looks=tools.get("looks", 0),
        looks_over_budget=tools.get("looks_over_budget", 0), looked_at=looked_at(app, case_id))


def looked_at(app: App, case_id: UUID) -> tuple[str, ...]:
    """The looks the run took, by name, as the gateway's ledger recorded them."""
    with app.engine.connect() as conn:
        tools = conn.execute(select(tool_call_ledger.c.tool).distinct().where(
            tool_call_ledger.c.session_id == session_of(case_id),
            tool_call_ledger.c.tool.like("look.%"))).scalars()
        return tuple(sorted(str(tool).removeprefix("look.") for tool in tools))
