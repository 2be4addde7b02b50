"""``opsgate serve``: the REST API over HTTP, with the in-process loop beside it (unless Redis
Streams carry the loop) and, when asked, Slack over Socket Mode."""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING

from core.cli.app import opened_app, settings_of
from core.cli.command import CliError, Command, database_option, shown

if TYPE_CHECKING:
    from core.bootstrap import App, Connection
    from core.loop import InProcessLoop


def serve_arguments(parser: argparse.ArgumentParser) -> None:
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
    database_option(parser)


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from core.allowed_hosts import allowed_hosts
    from core.api import create_api
    from core.evidence.configured import metrics_source_line
    from core.investigate.sources import sources_line
    from core.ops.rights import RightsWatch

    settings = settings_of(args)
    hosts = allowed_hosts(settings, bound_to=args.host)  # bound beyond loopback: named, or exit
    with opened_app(settings) as app:
        print(f"opsgate API on http://{args.host}:{args.port} "
              f"(database {shown(app.settings.database_url)}; {_access(app)})", flush=True)
        print(f"hosts: answers to {hosts} (a request naming another in Host or Origin is 403)",
              flush=True)
        print(f"metrics: {metrics_source_line(app.settings)}", flush=True)
        print(f"investigation: {sources_line(app.settings)}", flush=True)
        _warn(app)
        loop = socket = None
        rights = RightsWatch(app).start()  # who may approve what: every change audited
        try:
            loop = _serve_loop(app, args.no_loop)
            socket = _socket_mode(app) if args.socket_mode else None
            # uvicorn re-raises the SIGTERM it shut down on; without a handler of ours that
            # would end the process on the spot, before the loop stops after the message in
            # hand.
            signal.signal(signal.SIGTERM, _exit_cleanly)
            uvicorn.run(create_api(app), host=args.host, port=args.port,
                        log_level=args.log_level)
        finally:
            rights.stop()
            if socket is not None:
                socket.close()
            if loop is not None:
                loop.stop()
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


def _warn(app: App) -> None:
    """What the configuration leaves out, one line each, as ``/readyz`` says it."""
    from core.ops.readiness import warnings

    for line in warnings(app):
        print(f"warning: {line}", flush=True)


def _socket_mode(app: App) -> Connection:
    """Slack over Socket Mode, which the bot plugs in (``opsgate.extensions``)."""
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
    """The in-process loop beside the API, unless disabled or JetStream or Redis Streams carry
    the loop."""
    from core.loop import InProcessLoop

    if disabled:
        print("loop: off (--no-loop)", flush=True)
        return None
    if app.settings.bus_kind != "in-process":
        setting = "OPSGATE_BUS_URL" if app.settings.bus_url else "OPSGATE_REDIS_URL"
        print(f"loop: {setting} is set, so cases move through `opsgate relay` and "
              "`opsgate consume` processes, not inside serve", flush=True)
        return None
    loop = InProcessLoop(app).start()
    names = ", ".join(consumer.name for consumer in loop.consumers)
    print(f"loop: in-process relay and consumers running ({names})", flush=True)
    return loop


COMMANDS = (
    Command(
        name="serve",
        summary="serve the REST API over HTTP",
        description="Serve the REST API with uvicorn. On SQLite the schema is migrated first; "
                    "on PostgreSQL the command refuses to start unless the schema is at head "
                    "(run `opsgate migrate`). Once OPSGATE_API_TOKEN is set or any `opsgate "
                    "token` exists, writes need 'Authorization: Bearer <token>', and reads too "
                    "unless OPSGATE_API_READS=open. Requests must name the server in Host (and "
                    "Origin, when sent) by a loopback name or one of OPSGATE_ALLOWED_HOSTS, "
                    "which --host other than loopback requires.",
        add_arguments=serve_arguments,
        run=run_serve,
    ),
)
