"""The ``opsgate`` command: the subcommands every installed layer registers, one way.

Each command group is a module listing its ``Command``s in ``COMMANDS``; pyproject.toml names
each group once as an ``opsgate.commands`` entry point (the core's groups, and the bot's demo,
which the core never imports), and ``main`` builds one parser from them. Expected failures
(database unreachable, schema behind, bad URL) print one line on stderr and exit non-zero; a
settings mistake — an ``OPSGATE_*`` variable no setting reads included — prints one line per
problem and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from core.cli.command import (
    EXIT_BAD_SETTINGS,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    CliError,
    Command,
    first_line,
)

STARTED = time.perf_counter()
"""When this process started opsgate, so timings include the imports."""

COMMANDS_GROUP = "opsgate.commands"
"""The entry points naming each command group's ``COMMANDS``."""

__all__ = ["STARTED", "CliError", "Command", "build_parser", "main", "registered_commands"]


def registered_commands() -> list[Command]:
    """Every command of every installed group, by name (installers may reorder the groups)."""
    from importlib.metadata import entry_points

    commands: list[Command] = []
    for group in entry_points(group=COMMANDS_GROUP):
        commands.extend(group.load())
    if not commands:
        raise CliError("no opsgate command is registered: this installation's metadata is "
                       "older than its code; reinstall it (make install)")
    names = [command.name for command in commands]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise CliError(f"more than one package registers the command(s) {', '.join(twice)}")
    return sorted(commands, key=lambda command: command.name)


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opsgate",
        description="opsgate: a chat-ops bot for incident channels. The LLM proposes, a pure "
                    "state machine decides, one transaction records.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands:
        sub = subparsers.add_parser(command.name, help=command.summary,
                                    description=command.description)
        sub.set_defaults(run=command.run)
        command.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``opsgate`` subcommand; returns the exit code (the console script's entry)."""
    try:
        parser = build_parser(registered_commands())
    except CliError as broken:
        return _fail(str(broken), broken.exit_code)
    args = parser.parse_args(argv)
    _configure_logging()
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """``args.run(args)``, with every expected failure turned into lines on stderr."""
    from sqlalchemy.exc import SQLAlchemyError

    from core.errors import OpsgateError
    from core.settings import InvalidSettings

    try:
        refuse_unknown_settings()
        return int(args.run(args))
    except CliError as failed:
        return _fail(str(failed), failed.exit_code)
    except InvalidSettings as bad:
        for problem in bad.problems:
            _fail(problem)
        return EXIT_BAD_SETTINGS
    except OpsgateError as error:  # a policy or catalog that cannot be used is a setting's
        unusable = error.code in ("policy_invalid", "catalog_invalid")
        return _fail(error.message, EXIT_BAD_SETTINGS if unusable else EXIT_FAILED)
    except SQLAlchemyError as exc:
        return _fail(f"database error: {first_line(exc)}")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`opsgate demo | head`): stop quietly, and keep Python's own
        # flush at exit from failing on the closed pipe too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def refuse_unknown_settings() -> None:
    """Before any command runs: an ``OPSGATE_*`` variable, of the environment or of ``.env``,
    that neither core's settings nor a plugged-in layer's read is a mistake
    (``InvalidSettings``, one line each, exit 2)."""
    from core.cli.app import plugged_in
    from core.settings import InvalidSettings, env_file_names, unknown_settings

    unknown = unknown_settings(os.environ, *plugged_in().settings, env_file=env_file_names())
    if unknown:
        raise InvalidSettings(unknown)


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


def _fail(message: str, exit_code: int = EXIT_FAILED) -> int:
    print(f"opsgate: error: {message}", file=sys.stderr, flush=True)
    return exit_code
