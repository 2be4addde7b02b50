"""Benchmark: case transitions per second on PostgreSQL beside a bare ``INSERT …; COMMIT``.

Both are measured in the same run, at 1 and at 8 worker processes (each with its own engine, so
the GIL decides nothing), in a schema of their own that is dropped at the end. Each phase runs
``--rounds`` times and reports its median round, with the CPU its workers and their server
backends spent. Targets (issue 2): a transition costs at most 2x a committed insert at 1 worker,
and 8 workers give at least 3x the 1-worker transition rate.

Then the cost of a transition against the case's history (issue 43): on one case whose timeline
holds ``--history`` rows (10, 1,000 and 10,000 by default: alert notes, as an alert group's
intake writes them), the CPU (bench and server backend) of 20 resume -> plan_ready ->
gate_rejected cycles, per transition; target: the last no more than 1.5x the first. A cProfile
of the cycles at the largest size counts the timeline rows the service decoded (``entry_of``).
Figures last, as one line of JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing as mp
import os
import pstats
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from core.cases.rows import timeline_row
from core.cases.service import CaseService
from core.db.database import make_engine
from core.db.tables import case_timeline
from core.domain.commands import OpenCase, TransitionCase
from core.domain.fsm import CaseEvent
from core.domain.policy import ApprovalPolicy
from core.migrate import upgrade_engine

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WORKERS = 8
WARMUP_OPS = 20
COST_TARGET = 2.0
SCALE_TARGET = 3.0
HISTORY = (10, 1_000, 10_000)
HISTORY_TARGET = 1.5
HISTORY_CYCLES = 20

PLAN: dict[str, Any] = {
    "title": "roll back checkout to the previous release",
    "risk_score": 0.2,
    "steps": [{"action": "k8s.rollout", "params": {"deployment": "checkout", "to": "v41"},
               "timeout_s": 120, "retry": 1}],
    "rollback": {"action": "k8s.rollout", "params": {"deployment": "checkout", "to": "v42"}},
    "verify": {"metric": "http_5xx_rate", "below": 0.01, "for_s": 300},
}

# PARKED -resume-> PLANNING -plan_ready-> WAIT_GATE -gate_rejected-> PARKED, round and round.
CYCLE: tuple[tuple[CaseEvent, dict[str, Any] | None], ...] = (
    (CaseEvent.RESUME, None),
    (CaseEvent.PLAN_READY, PLAN),
    (CaseEvent.GATE_REJECTED, None),
)
CYCLE_START = {"PARKED": 0, "PLANNING": 1, "WAIT_GATE": 2}
TO_PARKED = (CaseEvent.START_ANALYSIS, CaseEvent.ANALYSIS_DONE, CaseEvent.PLAN_READY,
             CaseEvent.GATE_REJECTED)


# The gate's deciders are named (nobody decides otherwise): every worker's approver.
POLICY = ApprovalPolicy(approvers=frozenset(f"bench-approver-{n}" for n in range(64)))


def actor(event_name: CaseEvent, worker: int) -> str:
    """Who sends the event: the gate's decision comes from someone other than the requester,
    as the approval policy demands."""
    role = "approver" if event_name is CaseEvent.GATE_REJECTED else "sre"
    return f"bench-{role}-{worker}"


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def schema_url(url: str, schema: str) -> str:
    """``url`` with the bench schema first on the search path of every connection."""
    parsed = make_url(url)
    if parsed.host not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"the bench only runs against 127.0.0.1, not {parsed.host}")
    query = {"options": f"-csearch_path={schema}", "application_name": "opsgate-bench"}
    return parsed.update_query_dict(query).render_as_string(hide_password=False)


# -- what one worker does in a loop -----------------------------------------------------------

Loop = tuple[Callable[[], None], int]
"""One operation to repeat, and the pid of the server backend that serves it."""


def backend_pid(conn: Any) -> int:
    return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def insert_loop(engine: Engine, worker: int) -> Loop:
    """A bare committed insert of one row, on a connection held for the whole phase."""
    conn = engine.connect()
    statement = text("INSERT INTO bench_insert (payload) VALUES (CAST(:payload AS jsonb))")
    payload = json.dumps({"worker": worker, "note": "baseline row"})

    def once() -> None:
        conn.execute(statement, {"payload": payload})
        conn.commit()

    pid = backend_pid(conn)
    conn.commit()
    return once, pid


def transition_loop(engine: Engine, worker: int, case_id: uuid.UUID) -> Loop:
    """One real transition through the case service, a fresh Idempotency-Key each time,
    going on round the cycle from wherever the case stands."""
    service = CaseService(engine, policy=POLICY, reads_metrics=True)  # a metric check
    step = CYCLE_START[service.get_case(case_id)["status"]]

    def once() -> None:
        nonlocal step
        event_name, plan = CYCLE[step % len(CYCLE)]
        step += 1
        # the same plan comes back after each rejection: the resume asks for a retry
        cmd = TransitionCase(case_id=case_id, event=event_name, actor=actor(event_name, worker),
                             reason="retry (bench)" if event_name is CaseEvent.RESUME
                             else "bench", plan=plan)
        reply = service.transition(cmd, key=uuid.uuid4().hex)
        if not reply.ok:
            raise RuntimeError(f"transition {event_name} refused: {reply.body}")

    # The engine's pool holds one connection, so the service runs on this very backend.
    with engine.connect() as conn:
        pid = backend_pid(conn)
    return once, pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a local process has used so far (0 when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_main(kind: str, url: str, worker: int, case_id: str | None, seconds: float,
                barrier: Any, results: Any) -> None:
    """Warm up, wait for every worker, then count operations for ``seconds``, with the CPU time
    this process and its server backend spent on them."""
    engine = make_engine(url, pool_size=1)
    try:
        once, pid = (insert_loop(engine, worker) if kind == "insert"
                     else transition_loop(engine, worker, uuid.UUID(str(case_id))))
        for _ in range(WARMUP_OPS):
            once()
        barrier.wait(timeout=120)
        count, start = 0, time.perf_counter()
        client_cpu, server_cpu = time.process_time(), cpu_seconds(pid)
        deadline = start + seconds
        while time.perf_counter() < deadline:
            once()
            count += 1
        results.put({"worker": worker, "ops": count, "elapsed": time.perf_counter() - start,
                     "client_cpu": time.process_time() - client_cpu,
                     "server_cpu": cpu_seconds(pid) - server_cpu, "error": None})
    except BaseException as exc:  # report any failure to the parent, never hang it
        barrier.abort()
        results.put({"worker": worker, "error": repr(exc)})
    finally:
        engine.dispose()


# -- phases -----------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Phase:
    per_s: float
    kind: str
    workers: int
    ops: int
    cpu_s: float
    """CPU seconds the workers and their server backends spent, together."""
    elapsed: float

    @property
    def cpu_us_per_op(self) -> float:
        return self.cpu_s / self.ops * 1e6

    @property
    def cores_busy(self) -> float:
        return self.cpu_s / self.elapsed


def run_phase(ctx: Any, kind: str, workers: int, url: str, case_ids: list[uuid.UUID],
              seconds: float) -> Phase:
    say(f"{kind}: {workers} worker(s) for {seconds:g}s ...")
    barrier, results = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=worker_main, daemon=True,
                         args=(kind, url, w, str(case_ids[w]) if case_ids else None, seconds,
                               barrier, results))
             for w in range(workers)]
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=seconds + 180) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=10)
    failures = [outcome["error"] for outcome in outcomes if outcome["error"]]
    if failures:
        raise RuntimeError(f"{kind} workers failed: {failures}")
    ops = sum(outcome["ops"] for outcome in outcomes)
    per_s = sum(outcome["ops"] / outcome["elapsed"] for outcome in outcomes)
    cpu_s = sum(outcome["client_cpu"] + outcome["server_cpu"] for outcome in outcomes)
    elapsed = max(outcome["elapsed"] for outcome in outcomes)
    phase = Phase(per_s, kind, workers, ops, cpu_s, elapsed)
    say(f"{kind}: {workers} worker(s): {ops} ops, {per_s:,.0f}/s, "
        f"{phase.cpu_us_per_op:,.0f} us CPU/op, {phase.cores_busy:.2f} cores busy")
    return phase


def park_cases(engine: Engine, count: int) -> list[uuid.UUID]:
    """One case per worker, walked from NEW to PARKED so the cycle can start."""
    service = CaseService(engine, policy=POLICY, reads_metrics=True)  # a metric check
    case_ids = []
    for n in range(count):
        opened = service.open_case(OpenCase(title=f"bench case {n}", actor="bench"),
                                   key=uuid.uuid4().hex).data()
        case_id = uuid.UUID(opened["case_id"])
        for step in TO_PARKED:
            plan = PLAN if step is CaseEvent.PLAN_READY else None
            cmd = TransitionCase(case_id=case_id, event=step, actor=actor(step, n), plan=plan)
            service.transition(cmd, key=uuid.uuid4().hex).data()
        case_ids.append(case_id)
    return case_ids


def statements_per_transition(engine: Engine, case_id: uuid.UUID, cycles: int = 10) -> float:
    """SQL statements the service executes per transition (BEGIN, COMMIT and the ping aside)."""
    seen = 0

    def count(*_args: Any) -> None:
        nonlocal seen
        seen += 1

    event.listen(engine, "before_cursor_execute", count)
    try:
        once, _pid = transition_loop(engine, 0, case_id)
        for _ in range(cycles * len(CYCLE)):
            once()
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return seen / (cycles * len(CYCLE))


# -- the cost of a transition against the case's history ---------------------------------------

def fill_timeline(engine: Engine, case_id: uuid.UUID, rows: int) -> None:
    """Alert notes on the case until its timeline holds ``rows`` rows: the rows the intake's
    ``alert_new`` notes write (``handlers.note``), inserted in bulk to save the bench's time."""
    with engine.connect() as conn:
        have = int(conn.execute(text("SELECT count(*) FROM case_timeline WHERE case_id = :c"),
                                {"c": case_id}).scalar_one())
        status, version = conn.execute(text("SELECT status, version FROM ops_case WHERE id = :c"),
                                       {"c": case_id}).one()
    now = datetime.now(UTC)
    notes = [timeline_row(case_id, "alert_new", "alertmanager",
                          f"new alert in this group: HighErrorRate on checkout-{n}",
                          uuid.uuid4().hex, now, outcome="note", source=status,
                          target=status, version=version,
                          context={"group": "bench", "recurrence": 1, "fingerprint": f"{n:016x}",
                                   "alertname": "HighErrorRate", "starts_at": "2026-01-01"})
             for n in range(max(0, rows - have))]
    with engine.begin() as conn:
        for start in range(0, len(notes), 1000):
            conn.execute(case_timeline.insert(), notes[start:start + 1000])


def cycles_cost(engine: Engine, case_id: uuid.UUID, cycles: int) -> tuple[list[float], float]:
    """``cycles`` resume -> plan_ready -> gate_rejected cycles: each one's wall time, and the CPU
    seconds the bench process and its server backend spent on them all (what the other work on
    a shared machine does not change)."""
    once, pid = transition_loop(engine, 0, case_id)
    took = []
    client_cpu, server_cpu = time.process_time(), cpu_seconds(pid)
    for _ in range(cycles):
        start = time.perf_counter()
        for _ in range(len(CYCLE)):
            once()
        took.append(time.perf_counter() - start)
    return took, time.process_time() - client_cpu + cpu_seconds(pid) - server_cpu


def measure_history(engine: Engine, sizes: tuple[int, ...]) -> dict[str, Any]:
    """Per-transition cost on a case of each timeline size: CPU (bench + server backend) in us,
    the ratio's measure, and the median cycle's wall time / 3; and a profile of the cycles at
    the largest size: timeline rows decoded per transition, the plan_ready admission's time."""
    cpu_us: dict[str, float] = {}
    wall_us: dict[str, float] = {}
    profile: dict[str, Any] = {}
    for size in sizes:
        (case_id,) = park_cases(engine, 1)
        fill_timeline(engine, case_id, size)
        cycles_cost(engine, case_id, 3)  # warm up
        took, cpu = cycles_cost(engine, case_id, HISTORY_CYCLES)
        cpu_us[str(size)] = round(cpu / (HISTORY_CYCLES * len(CYCLE)) * 1e6)
        wall_us[str(size)] = round(statistics.median(took) / len(CYCLE) * 1e6)
        say(f"history: {size:,} timeline rows: {cpu_us[str(size)]:,} us CPU, "
            f"{wall_us[str(size)]:,} us wall per transition")
        if size == max(sizes):
            profile = profile_cycles(engine, case_id)
    first, last = cpu_us[str(sizes[0])], cpu_us[str(sizes[-1])]
    return {"history_rows": list(sizes), "history_cpu_us_per_transition": cpu_us,
            "history_wall_us_per_transition": wall_us,
            "history_ratio": round(last / first, 3),
            "history_target_met": last / first <= HISTORY_TARGET, **profile}


def profile_cycles(engine: Engine, case_id: uuid.UUID) -> dict[str, Any]:
    """cProfile of a few cycles: timeline rows decoded (``entry_of``) per transition, and the
    gate's ``plan_ready`` admission's cumulative time per plan_ready."""
    cycles = 5
    profiler = cProfile.Profile()
    profiler.enable()
    cycles_cost(engine, case_id, cycles)
    profiler.disable()
    stats = pstats.Stats(profiler)
    calls: dict[str, tuple[int, float]] = {}
    for (path, _line, name), (_cc, ncalls, _tt, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]  # not in typeshed
        if path.endswith(("core/cases/timeline.py", "core/cases/gate.py")):
            calls[name] = (ncalls, cumtime)
    decoded, _ = calls.get("entry_of", (0, 0.0))
    admit_calls, admit_s = calls.get("_admit_plan", (0, 0.0))
    return {"profile_rows_decoded_per_transition": round(decoded / (cycles * len(CYCLE)), 1),
            "profile_admit_plan_us": round(admit_s / max(1, admit_calls) * 1e6)}


# -- the run ----------------------------------------------------------------------------------

def measure(url: str, seconds: float, rounds: int, history: tuple[int, ...],
            concurrent: int = WORKERS) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    engine = make_engine(url, pool_size=2)
    try:
        upgrade_engine(engine)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE bench_insert "
                              "(id bigserial PRIMARY KEY, payload jsonb NOT NULL)"))
        say(f"setting up {1 + concurrent + 1} cases in PARKED")
        case_ids = park_cases(engine, 1 + concurrent + 1)
        statements = statements_per_transition(engine, case_ids.pop())
    finally:
        engine.dispose()
    # Each transition phase starts on cases of its own, all in PARKED.
    cases_of = {1: case_ids[:1], concurrent: case_ids[1:]}
    runs: dict[tuple[str, int], list[Phase]] = {}
    load_before = os.getloadavg()[0]
    for n in range(rounds):
        say(f"round {n + 1} of {rounds}")
        for workers in (1, concurrent):
            for kind in ("insert", "transition"):
                ids = cases_of[workers] if kind == "transition" else []
                runs.setdefault((kind, workers), []).append(
                    run_phase(ctx, kind, workers, url, ids, seconds))
    # Other work on the machine only ever slows a phase down: each phase's median round
    # stands for it, the same rule for the baseline and the transitions.
    phases = {which: statistics.median_low(r) for which, r in runs.items()}
    figures = summarize(phases, statements, (load_before, os.getloadavg()[0]), concurrent)
    figures["rounds"] = rounds
    engine = make_engine(url, pool_size=1)
    try:
        figures.update(measure_history(engine, history))
    finally:
        engine.dispose()
    figures["per_round_per_s"] = {f"{kind}_{workers}": [round(p.per_s) for p in r]
                                  for (kind, workers), r in runs.items()}
    return figures


def summarize(phases: dict[tuple[str, int], Phase], statements: float,
              load: tuple[float, float], concurrent: int) -> dict[str, Any]:
    """The figures; those named ``_8`` are at ``concurrent`` workers (8 unless ``--workers``)."""
    ins1, ins8 = phases["insert", 1].per_s, phases["insert", concurrent].per_s
    tr1, tr8 = phases["transition", 1].per_s, phases["transition", concurrent].per_s
    cost, scale = ins1 / tr1, tr8 / tr1
    cpus = os.cpu_count() or 1
    one = phases["transition", 1]
    return {
        "insert_per_s_1": round(ins1, 1),
        "insert_per_s_8": round(ins8, 1),
        "transition_per_s_1": round(tr1, 1),
        "transition_per_s_8": round(tr8, 1),
        "cost_ratio_1": round(cost, 3),
        "scale_8_over_1": round(scale, 3),
        "cost_target_met": cost <= COST_TARGET,
        "scale_target_met": scale >= SCALE_TARGET,
        "insert_scale_8_over_1": round(ins8 / ins1, 3),
        "statements_per_transition": round(statements, 2),
        # CPU (bench process + its server backend) per operation, at 1 worker; and the most
        # 8 workers could gain if CPU were the only limit: cores / cores one worker keeps busy.
        "cpu_us_per_insert_1": round(phases["insert", 1].cpu_us_per_op),
        "cpu_us_per_transition_1": round(one.cpu_us_per_op),
        "cpu_us_per_transition_8": round(phases["transition", concurrent].cpu_us_per_op),
        "cores_busy_transition_1": round(one.cores_busy, 2),
        "scale_ceiling_cpu": round(min(concurrent, cpus / one.cores_busy), 2),
        "cpus": cpus,
        "workers": concurrent,
        "load_avg_before": round(load[0], 2),
        "load_avg_after": round(load[1], 2),
    }


def print_table(figures: dict[str, Any], seconds: float, rounds: int) -> None:
    rows = [
        ("bare INSERT + COMMIT", figures["insert_per_s_1"], figures["insert_per_s_8"]),
        ("case transition", figures["transition_per_s_1"], figures["transition_per_s_8"]),
    ]
    print(f"\nTransitions on PostgreSQL ({seconds:g}s per phase, median of {rounds} rounds, "
          f"{figures['cpus']} CPUs, "
          f"load average {figures['load_avg_before']:g} before, "
          f"{figures['load_avg_after']:g} after)")
    n = figures["workers"]
    print(f"{'operation':<24}{'1 worker /s':>14}{f'{n} workers /s':>15}{f'{n} vs 1':>9}")
    for name, one, eight in rows:
        print(f"{name:<24}{one:>14,.0f}{eight:>15,.0f}{eight / one:>8.2f}x")
    met = {True: "met", False: "MISSED"}
    print(f"cost of a transition at 1 worker: {figures['cost_ratio_1']:.2f}x an insert "
          f"(target <= {COST_TARGET:g}x: {met[figures['cost_target_met']]})")
    print(f"transitions, {n} workers vs 1: {figures['scale_8_over_1']:.2f}x "
          f"(target >= {SCALE_TARGET:g}x: {met[figures['scale_target_met']]})")
    print(f"SQL statements per transition: {figures['statements_per_transition']:g} "
          "(plus BEGIN, the pool's ping and COMMIT)")
    print(f"CPU per op at 1 worker (bench + server backend): insert "
          f"{figures['cpu_us_per_insert_1']:,} us, transition "
          f"{figures['cpu_us_per_transition_1']:,} us; one transition worker keeps "
          f"{figures['cores_busy_transition_1']:g} cores busy, so {figures['cpus']} cores allow "
          f"at most {figures['scale_ceiling_cpu']:g}x")
    cpu, wall = figures["history_cpu_us_per_transition"], figures["history_wall_us_per_transition"]
    print("per transition on one case, by timeline rows (CPU; wall): "
          + ", ".join(f"{int(rows):,}: {us:,} us; {wall[rows]:,} us" for rows, us in cpu.items())
          + f"; last / first {figures['history_ratio']:.2f}x (target <= {HISTORY_TARGET:g}x: "
          f"{met[figures['history_target_met']]})")
    print(f"profile at {max(figures['history_rows']):,} rows: "
          f"{figures['profile_rows_decoded_per_transition']:g} timeline rows decoded per "
          f"transition; the gate's plan_ready admission {figures['profile_admit_plan_us']:,} "
          "us each\n")


def stop_cleanly_on_signals() -> None:
    """Ctrl-C and SIGTERM unwind through the ``finally`` that drops the schema (also when the
    bench was started with SIGINT ignored, as a background job of a script is)."""

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


SHORT: dict[str, Any] = {"seconds": 0.2, "rounds": 1, "history": "10,300,1000", "workers": 2}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="measured seconds per phase (four phases; default 5)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="times to run the four phases; each phase reports its median "
                             "round (default 3)")
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help="worker processes of the concurrent phases (default %(default)s; "
                             "the figures named _8 are at this many)")
    parser.add_argument("--history", default=",".join(map(str, HISTORY)),
                        help="timeline sizes of the history phase, comma-separated, smallest "
                             "first (default %(default)s)")
    parser.add_argument("--database-url", default=DEFAULT_URL,
                        help=f"PostgreSQL on 127.0.0.1 (default {DEFAULT_URL})")
    parser.add_argument("--short", action="store_true",
                        help=f"seconds and small sizes: {SHORT}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    if not 0 < args.seconds <= 120:
        parser.error("--seconds must be in (0, 120]")
    if not 1 <= args.rounds <= 9:
        parser.error("--rounds must be in [1, 9]")
    if not 2 <= args.workers <= 64:
        parser.error("--workers must be in [2, 64]")
    history = tuple(int(size) for size in args.history.split(","))
    if list(history) != sorted(history) or len(history) < 2 or history[0] < 5:
        parser.error("--history must be at least two sizes, smallest first, from 5 rows")
    stop_cleanly_on_signals()
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = schema_url(args.database_url, schema)
    admin = create_engine(args.database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    say(f"schema {schema} created")
    try:
        figures = measure(url, args.seconds, args.rounds, history, args.workers)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
        say(f"schema {schema} dropped")
    print_table(figures, args.seconds, args.rounds)
    print(json.dumps(figures, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        say("interrupted")
        sys.exit(130)
