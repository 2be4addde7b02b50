"""The operator's look at what happened: ``opsgate trace`` (one correlation id's hops),
``opsgate reconcile`` (ledger, outbox, dead letters and timelines checked against each other)
and ``opsgate export`` (a case's postmortem in Markdown)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from core.cli.app import opened_app, settings_of
from core.cli.command import Command, database_option

if TYPE_CHECKING:
    from core.bootstrap import App
    from core.catalog.model import Catalog

EXIT_FOUND = 1

Runner = Callable[["App", argparse.Namespace, TextIO], int]


def trace_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("correlation_id", metavar="CORRELATION_ID",
                        help="the X-Correlation-Id of a REST call, or the id a Slack request "
                             "or alert got (in logs, timeline rows and `opsgate export`)")
    parser.add_argument("--json", action="store_true", help="one JSON object per hop")
    database_option(parser)


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
                             "OPSGATE_BUS_URL or OPSGATE_REDIS_URL), send undelivered messages "
                             "again, release "
                             "expired claims of calls safe to run again, drop expired session "
                             "locks")
    parser.add_argument("--outbox-bound-s", type=float, metavar="SECONDS",
                        help="report outbox rows unpublished for longer than this (default: "
                             "$OPSGATE_RECONCILE_OUTBOX_LAG_S, else 300)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    database_option(parser)


def run_reconcile(app: App, args: argparse.Namespace, out: TextIO) -> int:
    from core.ops.reconcile import Reconciler

    bus: Any = None
    if args.repair and app.settings.bus_kind != "in-process":
        from core.cli.loop import connected_bus

        bus = connected_bus(app.settings, "reconcile")
    bound = args.outbox_bound_s or app.settings.reconcile_outbox_lag_s
    try:
        report = Reconciler(app.engine, outbox_bound_s=bound, bus=bus,
                            delivery_bound_s=app.settings.delivery_bound_s
                            ).run(repair=args.repair)
    finally:
        if bus is not None:
            from core.cli.loop import close_bus

            close_bus(bus)
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
    database_option(parser)


def run_export(app: App, args: argparse.Namespace, out: TextIO) -> int:
    from core.ops.export import export_case

    markdown = export_case(app.engine, app.cases.find_case_id(args.case),
                           name=people_of(app.catalog.current()))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(markdown)
        print(f"export: wrote {args.output}", file=out)
    else:
        out.write(markdown)
    return 0


def people_of(catalog: Catalog) -> Callable[[str], str]:
    """An actor as a person is called in the catalog (its ``slack.com/user-id``), else as is."""

    def name(actor: str) -> str:
        user = catalog.user_by_slack_id(actor)
        return actor if user is None else str(user.display_name or user.name)

    return name


def _on_app(run: Runner) -> Callable[[argparse.Namespace], int]:
    """``run`` on the app of the command line's settings, printing on stdout."""

    def command(args: argparse.Namespace) -> int:
        with opened_app(settings_of(args)) as app:
            return run(app, args, sys.stdout)

    return command


COMMANDS = (
    Command(
        name="trace",
        summary="print every hop of one correlation id, in order",
        description="Follow one correlation id (a REST call's X-Correlation-Id, a Slack "
                    "request's or an alert's) through case timeline rows, the outbox messages "
                    "they emitted, the consumers that took them (inbox receipts, dead letters) "
                    "and the gateway calls made on its behalf, oldest first. Exits 1 when "
                    "nothing carries the id.",
        add_arguments=trace_arguments,
        run=_on_app(run_trace),
    ),
    Command(
        name="reconcile",
        summary="check the ledger, outbox, dead letters and case timelines against each other",
        description="Report gateway calls stuck in progress past their lease, calls whose "
                    "outcome is unknown (finished after losing their lease: a person checks "
                    "the target each names), outbox rows unpublished past a bound, published "
                    "messages a consumer has not recorded past $OPSGATE_DELIVERY_BOUND_S, "
                    "consumers' dead letters, cases whose status "
                    "disagrees with the fold of their timeline, and expired session locks. "
                    "Exits 1 when anything is found, 0 on a clean run. --repair does only safe "
                    "repairs (re-publish stale outbox rows and undelivered messages through "
                    "Redis Streams, release expired claims of calls safe to run again, drop "
                    "expired session locks) and reports each.",
        add_arguments=reconcile_arguments,
        run=_on_app(run_reconcile),
    ),
    Command(
        name="export",
        summary="print a case's postmortem in Markdown",
        description="A postmortem of one case (by id or a prefix of 4+ hex digits): summary, "
                    "timeline, plans, approvals, step results, verification and model usage, "
                    "in Markdown to paste into a docs tool.",
        add_arguments=export_arguments,
        run=_on_app(run_export),
    ),
)
