"""The ``opsgate`` command: one subcommand per thing an operator runs (migrate, serve, demo; the
relay, trace, reconcile and export join ``SUBCOMMANDS`` later).

Expected failures (database unreachable, schema behind, bad URL) print one line on stderr and
exit non-zero; heavy imports happen inside the handlers so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from core.settings import Settings

STARTED = time.perf_counter()
"""When this process started opsgate, so timings include the imports."""

EXIT_FAILED = 1
EXIT_SCHEMA_BEHIND = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An expected failure: its message is all the operator needs to see."""

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
    from core.settings import Settings, load_settings

    if args.database_url:
        return Settings(database_url=args.database_url)
    return load_settings()


def _shown(url: str) -> str:
    """The URL as it may be printed: without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _engine(settings: Settings) -> Engine:
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from core.adapters.database import make_engine

    try:
        return make_engine(settings.database_url, pool_size=settings.db_pool_size)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise CliError(f"invalid database URL {settings.database_url!r}: {exc}") from exc


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
    from core.adapters.database import is_sqlite
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
    _database_option(parser)


def _run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from core.api import create_api
    from core.bootstrap import bootstrap

    settings = _settings(args)
    app = bootstrap(settings, engine=_engine(settings))
    try:
        _require_schema(settings, app.engine)
        writes = "need a bearer token" if settings.api_token else \
            "are open (OPSGATE_API_TOKEN is not set)"
        print(f"opsgate API on http://{args.host}:{args.port} "
              f"(database {_shown(settings.database_url)}; writes {writes})", flush=True)
        uvicorn.run(create_api(app), host=args.host, port=args.port, log_level=args.log_level)
    finally:
        app.close()
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from core.bootstrap import bootstrap
    from core.demo import DemoFailed, run_demo

    settings = _settings(args)
    app = bootstrap(settings, engine=_engine(settings))
    try:
        _require_schema(settings, app.engine)
        run_demo(app, sys.stdout)
    except DemoFailed as failed:
        raise CliError(f"demo failed: {failed}") from failed
    finally:
        app.close()
    print(f"demo done in {time.perf_counter() - STARTED:.2f} s (imports included)", flush=True)
    return 0


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
                    "(run `opsgate migrate`). Writes need 'Authorization: Bearer <token>' when "
                    "OPSGATE_API_TOKEN is set; reads are open.",
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
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opsgate",
        description="opsgate: a chat-ops bot for incident channels. The LLM proposes, a pure "
                    "state machine decides, one transaction records.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, sub in SUBCOMMANDS.items():
        sub_parser = commands.add_parser(name, help=sub.summary, description=sub.description)
        sub.add_arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``opsgate`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)

    from sqlalchemy.exc import SQLAlchemyError

    from core.errors import OpsgateError

    try:
        return SUBCOMMANDS[args.command].run(args)
    except CliError as failed:
        return _fail(str(failed), failed.exit_code)
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
