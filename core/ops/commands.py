"""The operator's subcommands ``trace``, ``reconcile`` and ``export``: their arguments and what
each prints. ``core.cli`` wires them (the app, the schema check, errors on stderr)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from core.bootstrap import App

EXIT_FOUND = 1


def trace_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("correlation_id", metavar="CORRELATION_ID",
                        help="the X-Correlation-Id of a REST call, or the id a Slack request "
                             "or alert got (in logs, timeline rows and `opsgate export`)")
    parser.add_argument("--json", action="store_true", help="one JSON object per hop")


def run_trace(app: App, args: argparse.Namespace, out: TextIO) -> int:
    from core.errors import NotFound
    from core.ops.trace import summary, trace

    hops = trace(app.engine, args.correlation_id)
    if not hops:
        raise NotFound(f"nothing carries the correlation id {args.correlation_id!r}")
    if args.json:
        for hop in hops:
            print(json.dumps(hop.as_dict(), sort_keys=True), file=out)
        return 0
    print(f"trace {args.correlation_id}: {summary(hops)}", file=out)
    for hop in hops:
        print(hop.line(), file=out)
    return 0


def reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repair", action="store_true",
                        help="also do the safe repairs: re-publish stale outbox rows (needs "
                             "OPSGATE_REDIS_URL), release expired claims of calls safe to run "
                             "again, drop expired session locks")
    parser.add_argument("--outbox-bound-s", type=float, metavar="SECONDS",
                        help="report outbox rows unpublished for longer than this (default: "
                             "$OPSGATE_RECONCILE_OUTBOX_LAG_S, else 300)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run_reconcile(app: App, args: argparse.Namespace, out: TextIO) -> int:
    from core.ops.reconcile import Reconciler

    bus, client = None, None
    if args.repair and app.settings.redis_url:
        from core.loop_processes import stream_bus, streams_client

        client = streams_client(app.settings.redis_url)
        bus = stream_bus(app.settings, client)
    bound = args.outbox_bound_s or app.settings.reconcile_outbox_lag_s
    try:
        report = Reconciler(app.engine, outbox_bound_s=bound, bus=bus).run(repair=args.repair)
    finally:
        if client is not None:
            client.close()
    if args.json:
        print(json.dumps(report.as_dict(), sort_keys=True, default=str), file=out)
    elif report.clean:
        print("reconcile: clean (ledger, outbox, dead letters, case timelines agree)", file=out)
    else:
        for finding in report.findings:
            print(finding.line(), file=out)
        repaired = len(report.repaired())
        print(f"reconcile: {len(report.findings)} finding(s), {repaired} repaired", file=out)
    return 0 if report.clean else EXIT_FOUND


def export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("case", metavar="CASE", help="a case id, or a prefix of 4+ hex digits")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the Markdown here instead of stdout")


def run_export(app: App, args: argparse.Namespace, out: TextIO) -> int:
    from core.ops.export import export_case

    markdown = export_case(app.engine, app.cases.find_case_id(args.case))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(markdown)
        print(f"export: wrote {args.output}", file=out)
    else:
        out.write(markdown)
    return 0


Runner = Callable[["App", argparse.Namespace, TextIO], int]
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Runner]] = {
    "trace": (trace_arguments, run_trace),
    "reconcile": (reconcile_arguments, run_reconcile),
    "export": (export_arguments, run_export),
}
