"""Benchmark: an alert storm on PostgreSQL — ``--groups`` (1,000) Alertmanager groups across
``--services`` (200) services, ``--notifications`` (10) webhook notifications per group spread
over ``--seconds`` (60), each one more alert firing than the last (so one opening, then one
``alert_new`` note per notification). One group, the largest case, fires ``--largest`` (2,000)
alerts in all. The intake runs as the REST endpoint runs it (``AlertIntake.receive``, without
the HTTP), called on time by ``--workers`` (16) threads, as Alertmanager sends in parallel.

Measured: notifications accepted per second, the intake's latency (p50/p99: the call alone,
and from the time it was due, which grows when the intake falls behind), the cases opened (must
equal the groups), and afterwards the cost of a gate decision (a resume -> plan_ready ->
gate_rejected cycle, per transition, CPU of the bench and its server backend) on the largest
case against the same on a quiet one (``gate_ratio``; issue 43: the same, whatever the notes).
Figures last, as one line of JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import Engine, text

from core.alerts.intake import AlertIntake
from core.alerts.model import Notification
from core.cases.service import CaseService
from core.db.database import make_engine
from core.domain.commands import TransitionCase
from core.domain.fsm import CaseEvent
from core.domain.policy import ApprovalPolicy
from core.migrate import scratch_schema

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
GATE_TARGET = 1.5
GATE_CYCLES = 10
APPROVER = "bench-lead"
PLAN: dict[str, Any] = {
    "title": "roll back checkout to the previous release",
    "risk_score": 0.2,
    "steps": [{"action": "noop", "params": {}, "timeout_s": 30, "retry": 0}],
    "rollback": {"action": "noop"},
    "verify": {"metric": "http_5xx_rate", "below": 0.01, "for_s": 300},
}
SHORT: dict[str, Any] = {"groups": 20, "services": 5, "notifications": 3, "seconds": 3.0,
                         "largest": 60, "workers": 8}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def alert(service: int, group: int, n: int) -> dict[str, Any]:
    instance = f"svc-{service}-pod-{n}"
    return {"status": "firing",
            "labels": {"alertname": f"HighErrorRate{group}", "service": f"svc-{service}",
                       "instance": instance, "severity": "critical"},
            "annotations": {"summary": f"5xx above 2% on {instance}"},
            "startsAt": "2026-11-23T05:00:00.000Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example.org:9090/graph?g0.expr=up",
            "fingerprint": hashlib.sha256(f"{group}/{instance}".encode()).hexdigest()[:16]}


def notification(service: int, group: int, alerts: int) -> Notification:
    """Group ``group``'s notification with its first ``alerts`` alerts firing."""
    labels = {"alertname": f"HighErrorRate{group}", "service": f"svc-{service}"}
    return Notification.model_validate({
        "version": "4", "status": "firing", "receiver": "opsgate", "truncatedAlerts": 0,
        "groupKey": f'{{}}/{{service="svc-{service}"}}:{{alertname="HighErrorRate{group}"}}',
        "groupLabels": labels, "commonLabels": {**labels, "severity": "critical"},
        "commonAnnotations": {}, "externalURL": "http://alertmanager.example.org:9093",
        "alerts": [alert(service, group, n) for n in range(alerts)]})


@dataclass(frozen=True)
class Due:
    """One notification and when Alertmanager sends it (seconds after the storm starts)."""

    at: float
    group: int
    notification: Notification


def storm(args: argparse.Namespace) -> list[Due]:
    """Every group's notifications, the k-th of each in the k-th slice of ``--seconds``, the
    groups spread across the slice; group 0 (the largest case) adds ``--largest`` alerts in
    all, the others one per notification."""
    slice_s = args.seconds / args.notifications
    due = []
    for group in range(args.groups):
        service = group % args.services
        step = max(1, args.largest // args.notifications) if group == 0 else 1
        for k in range(args.notifications):
            alerts = (k + 1) * step
            due.append(Due(k * slice_s + slice_s * group / args.groups, group,
                           notification(service, group, alerts)))
    return sorted(due, key=lambda d: d.at)


def run_storm(intake: AlertIntake, due: list[Due], workers: int) -> dict[str, Any]:
    """Send each notification on time (or as soon as a worker is free); per call: its latency,
    and its latency from the time it was due."""
    calls: list[float] = []
    lags: list[float] = []
    lock = threading.Lock()
    start = time.perf_counter() + 0.5

    def send(item: Due) -> None:
        wait = start + item.at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        began = time.perf_counter()
        intake.receive(item.notification)
        ended = time.perf_counter()
        with lock:
            calls.append(ended - began)
            lags.append(ended - (start + item.at))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(send, item) for item in due]:
            future.result()
    wall = time.perf_counter() - start
    return {"notifications": len(calls), "wall_s": round(wall, 2),
            "accepted_per_s": round(len(calls) / wall, 1),
            "intake_p50_ms": ms(statistics.median(calls)), "intake_p99_ms": ms(pct(calls, 0.99)),
            "due_p50_ms": ms(statistics.median(lags)), "due_p99_ms": ms(pct(lags, 0.99))}


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gate_cost(engine: Engine, service: CaseService, case_id: uuid.UUID) -> float:
    """CPU (bench + server backend, us) per transition of resume -> plan_ready -> gate_rejected
    cycles on the case, moved first from where the intake left it to the gate and parked."""
    def move(event: CaseEvent) -> None:
        actor = APPROVER if event is CaseEvent.GATE_REJECTED else "sre"
        plan = PLAN if event is CaseEvent.PLAN_READY else None
        # the same plan comes back after each rejection: the resume asks for a retry
        reason = "retry (bench)" if event is CaseEvent.RESUME else "bench"
        service.transition(TransitionCase(case_id, event, actor=actor, reason=reason,
                                          plan=plan), key=uuid.uuid4().hex).data()

    for event in (CaseEvent.START_ANALYSIS, CaseEvent.ANALYSIS_DONE, CaseEvent.PLAN_READY,
                  CaseEvent.GATE_REJECTED):
        move(event)
    cycle = (CaseEvent.RESUME, CaseEvent.PLAN_READY, CaseEvent.GATE_REJECTED)
    with engine.connect() as conn:  # the pool's one connection: the service's backend
        pid = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
    for event in cycle:  # warm up
        move(event)
    began = time.process_time(), cpu_seconds(pid)
    for _ in range(GATE_CYCLES):
        for event in cycle:
            move(event)
    spent = time.process_time() - began[0] + cpu_seconds(pid) - began[1]
    return spent / (GATE_CYCLES * len(cycle)) * 1e6


def cases_of(engine: Engine) -> list[tuple[uuid.UUID, int]]:
    """Each case and its timeline rows, the largest first."""
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT c.id, (SELECT count(*) FROM case_timeline t WHERE t.case_id = c.id) AS n "
            "FROM ops_case c ORDER BY n DESC")).all()
    return [(row[0], int(row[1])) for row in rows]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    due = storm(args)
    say(f"{len(due):,} notifications of {args.groups:,} groups across {args.services} services "
        f"over {args.seconds:g} s, {args.workers} senders")
    policy = ApprovalPolicy(approvers=frozenset({APPROVER}))
    with scratch_schema(args.postgres_url, prefix="bench_alerts",
                        pool_size=args.workers + 2) as engine:
        service = CaseService(engine, policy=policy, reads_metrics=True)
        figures = run_storm(AlertIntake(engine, service), due, args.workers)
        cases = cases_of(engine)
        say(f"storm: {figures['accepted_per_s']:,}/s accepted, intake p99 "
            f"{figures['intake_p99_ms']:,} ms; {len(cases):,} cases")
        # The gate afterwards, on a pool of one connection (its backend's CPU is counted).
        single = make_engine(engine.url.render_as_string(hide_password=False), pool_size=1)
        try:
            one = CaseService(single, policy=policy, reads_metrics=True)
            (largest, rows), (quiet, quiet_rows) = cases[0], cases[-1]
            on_largest = gate_cost(single, one, largest)
            on_quiet = gate_cost(single, one, quiet)
        finally:
            single.dispose()
    say(f"gate: {on_largest:,.0f} us per transition on the largest case ({rows:,} rows), "
        f"{on_quiet:,.0f} us on a quiet one ({quiet_rows:,})")
    return {**figures, "groups": args.groups, "services": args.services,
            "cases_opened": len(cases), "cases_equal_groups": len(cases) == args.groups,
            "largest_case_rows": rows, "quiet_case_rows": quiet_rows,
            "gate_us_largest": round(on_largest), "gate_us_quiet": round(on_quiet),
            "gate_ratio": round(on_largest / on_quiet, 3),
            "gate_target_met": on_largest / on_quiet <= GATE_TARGET,
            "load_avg": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--notifications", type=int, default=10, help="per group")
    parser.add_argument("--seconds", type=float, default=60.0, help="the storm's length")
    parser.add_argument("--largest", type=int, default=2000,
                        help="alerts the largest group fires in all (one note each)")
    parser.add_argument("--workers", type=int, default=16, help="notifications sent at once")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--short", action="store_true",
                        help=f"seconds and small sizes: {SHORT}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    if not (1 <= args.services <= args.groups <= 100_000 and 1 <= args.notifications <= 100
            and 0 < args.seconds <= 600 and 1 <= args.workers <= 64
            and args.notifications <= args.largest <= 20_000):
        parser.error("keep it bounded: 1 <= services <= groups <= 100,000, 1..100 "
                     "notifications, at most 600 s, 1..64 workers, notifications <= largest "
                     "<= 20,000")
    figures = measure(args)
    print(json.dumps(figures, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
