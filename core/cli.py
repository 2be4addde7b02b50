"""The ``opsgate`` command: one subcommand per thing an operator runs (migrate, serve, demo, and
the loop's relay, consume and outbox; the operator's trace, reconcile, export and token).

Expected failures (database unreachable, schema behind, bad URL) print one line on stderr and
exit non-zero; a settings mistake prints one line per problem and exits 2. Heavy imports happen
inside the handlers so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import OpsgateError

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from core.bootstrap import App, Connection, Extensions
    from core.loop import InProcessLoop
    from core.messaging.bus import RedisStreamsBus
    from core.messaging.envelope import Envelope
    from core.settings import Settings

STARTED = time.perf_counter()
"""When this process started opsgate, so timings include the imports."""

EXIT_FAILED = 1
EXIT_SCHEMA_BEHIND = 2
EXIT_BAD_SETTINGS = 2
EXIT_INTERRUPTED = 130


class CliError(OpsgateError):
    """An expected failure: its message is all the operator needs to see."""

    code = "cli_error"

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Subcommand:
    summary: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# -- shared options and steps ---------------------------------------------------------------


def _database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url", metavar="URL",
        help="SQLAlchemy URL, e.g. sqlite:///./opsgate.db or postgresql://user@host/db "
             "(default: $OPSGATE_DATABASE_URL, else sqlite:///./opsgate.db)",
    )


def _settings(args: argparse.Namespace) -> Settings:
    from core.settings import load_settings

    return load_settings(database_url=args.database_url or None)


def _shown(url: str) -> str:
    """The URL as it may be printed: without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _engine(settings: Settings) -> Engine:
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from core.db.database import make_engine

    try:
        return make_engine(settings.database_url, pool_size=settings.db_pool_size)
    except (ArgumentError, NoSuchModuleError) as exc:
        from core.redact import url_without_credentials

        shown, why = url_without_credentials(settings.database_url), _first_line(exc)
        raise CliError(f"invalid database URL {shown!r}: {url_without_credentials(why)}; "
                       "expected a SQLAlchemy URL such as sqlite:///./opsgate.db or "
                       "postgresql+psycopg://user@host/db", exit_code=EXIT_BAD_SETTINGS) from exc


def _migrate(settings: Settings, engine: Engine) -> None:
    """Upgrade the database to head and say what changed."""
    from core.migrate import current_revision, head_revision, upgrade

    before, where = current_revision(engine), _shown(settings.database_url)
    if before == head_revision():
        print(f"database {where}: already at head ({before})", flush=True)
        return
    upgrade(settings.database_url)
    after = current_revision(engine)
    print(f"database {where}: upgraded from {before or 'an empty schema'} to head ({after})",
          flush=True)


def _require_schema(settings: Settings, engine: Engine) -> None:
    """SQLite (the embedded default) is migrated on the spot; any other database must already be
    at head, since upgrading production is an operator's decision (`opsgate migrate`)."""
    from core.db.database import is_sqlite
    from core.migrate import current_revision, head_revision

    if is_sqlite(engine):
        _migrate(settings, engine)
        return
    current, head = current_revision(engine), head_revision()
    if current != head:
        found = "no opsgate schema" if current is None else f"schema revision {current}"
        raise CliError(
            f"the database {_shown(settings.database_url)} has {found}, this opsgate needs "
            f"revision {head}: run `opsgate migrate` first",
            exit_code=EXIT_SCHEMA_BEHIND,
        )


# -- subcommands -----------------------------------------------------------------------------


def _run_migrate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    engine = _engine(settings)
    try:
        _migrate(settings, engine)
    finally:
        engine.dispose()
    return 0


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080,
                        help="port to bind (default: %(default)s)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level (default: %(default)s)")
    parser.add_argument("--no-loop", action="store_true",
                        help="do not run the in-process loop (relay and consumers); cases then "
                             "move only through the API or separate `opsgate relay`/`opsgate "
                             "consume` processes")
    parser.add_argument("--socket-mode", action="store_true",
                        help="also connect to Slack over Socket Mode (SLACK_APP_TOKEN) instead "
                             "of waiting for Slack's HTTP requests")
    _database_option(parser)


def _run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from core.api import create_api
    from core.bootstrap import bootstrap

    settings = _settings(args)
    app = bootstrap(settings, engine=_engine(settings), extensions=args.extensions)
    loop = socket = None
    try:
        _require_schema(settings, app.engine)
        print(f"opsgate API on http://{args.host}:{args.port} "
              f"(database {_shown(settings.database_url)}; {_access(app)})", flush=True)
        loop = _serve_loop(app, args.no_loop)
        socket = _serve_socket_mode(app) if args.socket_mode else None
        # uvicorn re-raises the SIGTERM it shut down on; without a handler of ours that would
        # end the process on the spot, before the loop stops after the message in hand.
        signal.signal(signal.SIGTERM, _exit_cleanly)
        uvicorn.run(create_api(app), host=args.host, port=args.port, log_level=args.log_level)
    finally:
        if socket is not None:
            socket.close()
        if loop is not None:
            loop.stop()
        app.close()
    return 0


def _access(app: App) -> str:
    """Who may call the API, in words, for the serve banner."""
    from core.principals import tokens_configured

    token = app.settings.api_token
    if not tokens_configured(app.engine, None if token is None else token.get_secret_value()):
        return "writes are open: no OPSGATE_API_TOKEN, no `opsgate token`; nobody approves over " \
               "REST"
    reads = "reads are open" if app.settings.api_reads == "open" else "reads need one too"
    return f"writes need a bearer token, {reads}"


def _serve_socket_mode(app: App) -> Connection:
    """Slack over Socket Mode, which the bot plugs in (``opsgate``, not ``python -m core.cli``)."""
    connect = app.extensions.socket_mode
    if connect is None:
        raise CliError("--socket-mode needs the Slack bot: run `opsgate serve --socket-mode`")
    try:
        socket = connect(app)
    except ValueError as refused:
        raise CliError(f"socket mode: {refused}") from refused
    print("slack: connected over Socket Mode", flush=True)
    return socket


def _exit_cleanly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _serve_loop(app: App, disabled: bool) -> InProcessLoop | None:
    """The in-process loop beside the API, unless disabled or Redis Streams carry the loop."""
    from core.loop import InProcessLoop

    if disabled:
        print("loop: off (--no-loop)", flush=True)
        return None
    if app.settings.redis_url:
        print("loop: OPSGATE_REDIS_URL is set, so cases move through `opsgate relay` and "
              "`opsgate consume` processes, not inside serve", flush=True)
        return None
    loop = InProcessLoop(app).start()
    names = ", ".join(consumer.name for consumer in loop.consumers)
    print(f"loop: in-process relay and consumers running ({names})", flush=True)
    return loop


def _run_demo(args: argparse.Namespace) -> int:
    from core.bootstrap import bootstrap
    from core.demo import DemoFailed, run_demo

    settings = _settings(args)
    app = bootstrap(settings, engine=_engine(settings), extensions=args.extensions)
    try:
        _require_schema(settings, app.engine)
        run_demo(app, sys.stdout)
    except DemoFailed as failed:
        raise CliError(f"demo failed: {failed}") from failed
    finally:
        app.close()
    print(f"demo done in {time.perf_counter() - STARTED:.2f} s (imports included)", flush=True)
    return 0


# -- the loop's processes (production: PostgreSQL + Redis Streams) -------------------------


def _production_app(args: argparse.Namespace, what: str) -> App:
    """The app of a relay or consume process: needs Redis Streams and a schema at head."""
    from core.bootstrap import bootstrap

    settings = _settings(args)
    if not settings.redis_url:
        raise CliError(f"{what} needs OPSGATE_REDIS_URL (Redis Streams carry the messages "
                       "between processes); without Redis the loop runs in-process inside "
                       "`opsgate serve`")
    app = bootstrap(settings, engine=_engine(settings), extensions=args.extensions)
    try:
        _require_schema(settings, app.engine)
        _serve_metrics(settings, what)
    except BaseException:
        app.close()
        raise
    return app


def _serve_metrics(settings: Settings, what: str) -> None:
    """``/metrics`` of a relay or consume process on OPSGATE_METRICS_PORT, when it is set."""
    if settings.metrics_port is None:
        return
    from prometheus_client import start_http_server

    try:
        start_http_server(settings.metrics_port)
    except OSError as exc:
        raise CliError(f"cannot serve metrics on port {settings.metrics_port}: {exc}") from exc
    print(f"{what}: metrics on port {settings.metrics_port} (/metrics)", flush=True)


def _streams(settings: Settings) -> RedisStreamsBus:
    import redis

    from core.loop_processes import stream_bus, streams_client

    assert settings.redis_url is not None
    client = streams_client(settings.redis_url)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise CliError(f"Redis at {_shown(settings.redis_url)} is not reachable: {exc}") from exc
    return stream_bus(settings, client)


def _loop_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress-s", type=float, default=10.0, metavar="SECONDS",
                        help="print a progress line this often when something moved "
                             "(default: %(default)s)")
    _database_option(parser)


def _run_relay(args: argparse.Namespace) -> int:
    import threading

    from core.loop_processes import run_relay
    from core.messaging.outbox import unpublished
    from core.messaging.supervisor import stop_on_signals

    app = _production_app(args, "relay")
    try:
        settings, bus = app.settings, _streams(app.settings)
        print(f"relay: database {_shown(settings.database_url)} -> Redis streams "
              f"{settings.stream_prefix}<topic> at {_shown(str(settings.redis_url))}; "
              f"woken by NOTIFY, polling every {settings.relay_poll_s:g}s; "
              f"{unpublished(app.engine)} messages waiting", flush=True)
        stop = threading.Event()
        stop_on_signals(stop)
        published = run_relay(app, bus, stop, sys.stdout, progress_every_s=args.progress_s)
        bus.client.close()
    finally:
        app.close()
    print(f"relay: stopped after publishing {published} messages", flush=True)
    return 0


def _consume_arguments(parser: argparse.ArgumentParser) -> None:
    from core.consumers import CONSUMER_NAMES

    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"consumers to run (default: all of {', '.join(CONSUMER_NAMES)})")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="stream readers per consumer in this process (default: "
                             "%(default)s); more processes scale the same way")
    _loop_arguments(parser)


def _run_consume(args: argparse.Namespace) -> int:
    import threading

    from core.consumers import build_consumers
    from core.loop_processes import ConsumerProcess, select_consumers
    from core.messaging.supervisor import stop_on_signals

    if args.workers < 1:
        raise CliError("--workers must be at least 1")
    app = _production_app(args, "consume")
    try:
        try:
            consumers = select_consumers(build_consumers(app), args.names)
        except KeyError as unknown:
            raise CliError(str(unknown.args[0])) from unknown
        bus = _streams(app.settings)
        process = ConsumerProcess(app, bus, consumers, workers=args.workers)
        print(f"consume: {', '.join(c.name for c in consumers)} as {process.name} "
              f"({args.workers} reader(s) each) on Redis streams {app.settings.stream_prefix}"
              f"<topic>", flush=True)
        stop = threading.Event()
        stop_on_signals(stop)
        process.run(stop, sys.stdout, progress_every_s=args.progress_s)
        bus.client.close()
    finally:
        app.close()
    print(f"consume: stopped ({process.progress()})", flush=True)
    return 0


def _outbox_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="outbox_command", metavar="ACTION", required=True)
    dead = actions.add_parser(
        "dead", help="list dead letters, or requeue one",
        description="List the messages consumers gave up on after their retries (dead "
                    "letters), newest last. --requeue ID delivers one again to its consumer: "
                    "its inbox entry is forgotten and its outbox row marked unpublished, so the "
                    "running relay (`opsgate relay`, or the loop inside `opsgate serve`) "
                    "publishes it again.")
    dead.add_argument("--requeue", type=int, metavar="ID",
                      help="the dead letter (the ID column) to deliver again")
    dead.add_argument("--all", action="store_true",
                      help="also list dead letters already requeued")
    _database_option(dead)


def _run_outbox(args: argparse.Namespace) -> int:
    from core.bootstrap import bootstrap

    settings = _settings(args)
    app = bootstrap(settings, engine=_engine(settings), extensions=args.extensions)
    try:
        _require_schema(settings, app.engine)
        if args.requeue is not None:
            _requeue(app, args.requeue)
        else:
            _list_dead_letters(app, args.all)
    finally:
        app.close()
    return 0


def _list_dead_letters(app: App, include_requeued: bool) -> None:
    from core.messaging import inbox

    rows = inbox.dead_letters(app.engine, include_requeued=include_requeued)
    if not rows:
        print("no dead letters", flush=True)
        return
    header = ("ID", "CONSUMER", "MESSAGE", "TOPIC", "CASE", "ATTEMPTS", "DIED", "REQUEUED",
              "ERROR")
    lines = [header] + [(
        str(row["id"]), row["consumer"], str(row["message_id"]), row["topic"], row["key"],
        str(row["attempts"]), _moment(row["created_at"]), _moment(row["requeued_at"]),
        " ".join(str(row["error"]).split())[:80],
    ) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
              .rstrip(), flush=True)


def _moment(value: object) -> str:
    from datetime import datetime

    return value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else "-"


def _requeue(app: App, dead_letter_id: int) -> None:
    from core.loop_processes import requeue_dead_letter

    direct: Callable[[Envelope], None] | None = None
    if app.settings.redis_url:
        bus = _streams(app.settings)

        def direct(envelope: Envelope) -> None:
            bus.publish([envelope])

    try:
        envelope = requeue_dead_letter(app, dead_letter_id, direct)
    except LookupError as gone:
        raise CliError(str(gone)) from gone
    if envelope is None:
        raise CliError(f"no dead letter {dead_letter_id}: `opsgate outbox dead` lists them")
    print(f"requeued dead letter {dead_letter_id}: message {envelope.message_id} "
          f"({envelope.topic}, case {envelope.key}) goes to its consumer again", flush=True)


# -- operations: trace, reconcile, export (core.ops.commands) ------------------------------


def _ops_arguments(name: str) -> Callable[[argparse.ArgumentParser], None]:
    def add(parser: argparse.ArgumentParser) -> None:
        from core.ops.commands import COMMANDS

        COMMANDS[name][0](parser)
        _database_option(parser)

    return add


def _run_ops(args: argparse.Namespace) -> int:
    from core.bootstrap import bootstrap
    from core.ops.commands import COMMANDS

    settings = _settings(args)
    app = bootstrap(settings, engine=_engine(settings), extensions=args.extensions)
    try:
        _require_schema(settings, app.engine)
        return COMMANDS[args.command][1](app, args, sys.stdout)
    finally:
        app.close()


# -- API principals: token create, list, revoke (core.ops.tokens) ---------------------------


def _token_arguments(parser: argparse.ArgumentParser) -> None:
    from core.ops.tokens import token_arguments

    token_arguments(parser, _database_option)


def _run_token(args: argparse.Namespace) -> int:
    from contextlib import redirect_stdout

    from core.ops.tokens import run_token

    settings = _settings(args)
    engine = _engine(settings)
    try:
        with redirect_stdout(sys.stderr):  # stdout is the new token alone: $(opsgate token …)
            _require_schema(settings, engine)
        return run_token(engine, args, sys.stdout, sys.stderr)
    finally:
        engine.dispose()


# -- MCP over stdio (core.mcp.stdio) ---------------------------------------------------------


def _mcp_arguments(parser: argparse.ArgumentParser) -> None:
    from core.mcp.stdio import stdio_arguments

    stdio_arguments(parser)
    _database_option(parser)


def _run_mcp(args: argparse.Namespace) -> int:
    from contextlib import redirect_stdout

    from core.bootstrap import bootstrap
    from core.mcp.stdio import serve_stdio, stdio_principal

    settings = _settings(args)
    app = bootstrap(settings, engine=_engine(settings))
    try:
        with redirect_stdout(sys.stderr):  # stdout is the MCP wire
            _require_schema(settings, app.engine)
            principal = stdio_principal(app, args.token)
        print(f"opsgate mcp: serving the case tools on stdio as {principal.name} "
              f"({principal.role})", file=sys.stderr, flush=True)
        serve_stdio(app, principal)
    finally:
        app.close()
    return 0


def _configure_logging() -> None:
    """Structured logs when asked (OPSGATE_LOG_FORMAT=json, or OPSGATE_LOG_LEVEL set); otherwise
    Python's default, which people read."""
    from core.settings import InvalidSettings, load_settings
    from core.tracing import configure_logging

    try:
        settings = load_settings()
    except InvalidSettings:
        return  # the subcommand reports the bad setting itself
    if settings.log_format == "json" or "log_level" in settings.model_fields_set:
        configure_logging(settings.log_format, settings.log_level)


SUBCOMMANDS: dict[str, Subcommand] = {
    "migrate": Subcommand(
        summary="upgrade the database schema to the latest revision",
        description="Run the alembic migrations up to head on the configured database "
                    "(SQLite or PostgreSQL) and print the revision before and after.",
        add_arguments=_database_option,
        run=_run_migrate,
    ),
    "serve": Subcommand(
        summary="serve the REST API over HTTP",
        description="Serve the REST API with uvicorn. On SQLite the schema is migrated first; "
                    "on PostgreSQL the command refuses to start unless the schema is at head "
                    "(run `opsgate migrate`). Once OPSGATE_API_TOKEN is set or any `opsgate token` "
                    "exists, writes need 'Authorization: Bearer <token>', and reads too unless "
                    "OPSGATE_API_READS=open.",
        add_arguments=_serve_arguments,
        run=_run_serve,
    ),
    "demo": Subcommand(
        summary="walk one case through its whole life on the embedded default",
        description="Open a case and move it from NEW to CLOSED through the REST API in process, "
                    "showing an Idempotency-Key replay, an illegal event (409), a stale If-Match "
                    "(412) and a plan refused by the guard (422); then print the case's "
                    "timeline. Uses the SQLite file from settings, migrated automatically.",
        add_arguments=_database_option,
        run=_run_demo,
    ),
    "relay": Subcommand(
        summary="publish committed outbox rows to Redis Streams (production loop)",
        description="Move unpublished outbox rows onto Redis Streams (one stream per topic, "
                    "$OPSGATE_STREAM_PREFIX<topic>) in id order, claiming them with FOR UPDATE "
                    "SKIP LOCKED so several relays may run at once. Woken by PostgreSQL "
                    "LISTEN/NOTIFY, polling every $OPSGATE_RELAY_POLL_S seconds (default 1.0) "
                    "as the floor. Needs OPSGATE_REDIS_URL; without Redis the loop runs "
                    "in-process inside `opsgate serve`. SIGTERM or Ctrl-C stops it after the "
                    "batch in hand.",
        add_arguments=_loop_arguments,
        run=_run_relay,
    ),
    "consume": Subcommand(
        summary="run consumers on their Redis Streams consumer groups (production loop)",
        description="Run the named consumers (default: all) in this process, each reading its "
                    "topics' streams through a consumer group named after it (XREADGROUP, XACK "
                    "after handling, XAUTOCLAIM of entries a dead process left pending longer "
                    "than $OPSGATE_STREAM_CLAIM_IDLE_S). Each message takes effect once "
                    "(inbox); a message failing $OPSGATE_CONSUMER_MAX_ATTEMPTS times becomes a "
                    "dead letter (`opsgate outbox dead`). Needs OPSGATE_REDIS_URL. SIGTERM or "
                    "Ctrl-C stops it after the messages in hand.",
        add_arguments=_consume_arguments,
        run=_run_consume,
    ),
    "outbox": Subcommand(
        summary="inspect the outbox: dead letters and their requeue",
        description="Operator tools for the outbox and its consumers. "
                    "`opsgate outbox dead` lists dead letters; "
                    "`opsgate outbox dead --requeue ID` delivers one again.",
        add_arguments=_outbox_arguments,
        run=_run_outbox,
    ),
    "trace": Subcommand(
        summary="print every hop of one correlation id, in order",
        description="Follow one correlation id (a REST call's X-Correlation-Id, a Slack "
                    "request's or an alert's) through case timeline rows, the outbox messages "
                    "they emitted, the consumers that took them (inbox receipts, dead letters) "
                    "and the gateway calls made on its behalf, oldest first. Exits 1 when "
                    "nothing carries the id.",
        add_arguments=_ops_arguments("trace"),
        run=_run_ops,
    ),
    "reconcile": Subcommand(
        summary="check the ledger, outbox, dead letters and case timelines against each other",
        description="Report gateway calls stuck in progress past their lease, outbox rows "
                    "unpublished past a bound, consumers' dead letters, cases whose status "
                    "disagrees with the fold of their timeline, and expired session locks. "
                    "Exits 1 when anything is found, 0 on a clean run. --repair does only safe "
                    "repairs (re-publish stale outbox rows through Redis Streams, release "
                    "expired claims of calls safe to run again, drop expired session locks) "
                    "and reports each.",
        add_arguments=_ops_arguments("reconcile"),
        run=_run_ops,
    ),
    "export": Subcommand(
        summary="print a case's postmortem in Markdown",
        description="A postmortem of one case (by id or a prefix of 4+ hex digits): summary, "
                    "timeline, plans, approvals, step results, verification and model usage, "
                    "in Markdown to paste into a docs tool.",
        add_arguments=_ops_arguments("export"),
        run=_run_ops,
    ),
    "mcp": Subcommand(
        summary="serve the case tools over the Model Context Protocol on stdio",
        description="Serve opsgate's case tools (read, open, note, record findings, propose "
                    "plans; never approve or execute) to an MCP client such as a desktop app or "
                    "an IDE, on stdin/stdout, as the principal of --token or "
                    "$OPSGATE_MCP_TOKEN (else the local operator). Every write goes through the "
                    "gateway: a retried call replays. `opsgate serve` also serves them over "
                    "streamable HTTP at /mcp. See docs/mcp.md.",
        add_arguments=_mcp_arguments,
        run=_run_mcp,
    ),
    "token": Subcommand(
        summary="create, list or revoke the API's principals (bearer tokens)",
        description="REST callers are principals named by their bearer token, each a reader, "
                    "operator or approver; an approver is a person linked to their Slack id. "
                    "`opsgate token create NAME [--role R] [--slack-user U…]` prints a new "
                    "token once (the database keeps only its SHA-256); `opsgate token list` "
                    "shows principals, never tokens; `opsgate token revoke NAME` ends one.",
        add_arguments=_token_arguments,
        run=_run_token,
    ),
}


def build_parser(subcommands: Mapping[str, Subcommand] | None = None
                 ) -> argparse.ArgumentParser:
    """The parser of ``SUBCOMMANDS``, where ``subcommands`` add or replace some (the bot's
    ``demo`` runs the sandbox; the core's demo walks the REST API)."""
    parser = argparse.ArgumentParser(
        prog="opsgate",
        description="opsgate: a chat-ops bot for incident channels. The LLM proposes, a pure "
                    "state machine decides, one transaction records.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, sub in {**SUBCOMMANDS, **(subcommands or {})}.items():
        sub_parser = commands.add_parser(name, help=sub.summary, description=sub.description)
        sub_parser.set_defaults(run=sub.run)
        sub.add_arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None, extensions: Extensions | None = None,
         subcommands: Mapping[str, Subcommand] | None = None) -> int:
    """Run one ``opsgate`` subcommand with what ``extensions`` plug in (the console script
    passes the agent's and the bot's, and its own ``subcommands``); returns the exit code."""
    args = build_parser(subcommands).parse_args(argv)
    args.extensions = extensions
    _configure_logging()

    from sqlalchemy.exc import SQLAlchemyError

    from core.errors import OpsgateError
    from core.settings import InvalidSettings

    try:
        return int(args.run(args))
    except CliError as failed:
        return _fail(str(failed), failed.exit_code)
    except InvalidSettings as bad:
        for problem in bad.problems:
            _fail(problem)
        return EXIT_BAD_SETTINGS
    except OpsgateError as error:
        return _fail(error.message)
    except SQLAlchemyError as exc:
        return _fail(f"database error: {_first_line(exc)}")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`opsgate demo | head`): stop quietly, and keep Python's own
        # flush at exit from failing on the closed pipe too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def _first_line(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def _fail(message: str, exit_code: int = EXIT_FAILED) -> int:
    print(f"opsgate: error: {message}", file=sys.stderr, flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
