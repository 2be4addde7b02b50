"""What every ``opsgate`` subcommand is made of: a ``Command`` (name, help, arguments, run), the
``CliError`` an expected failure raises, the exit codes, and the options commands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from core.errors import OpsgateError

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
class Command:
    """One subcommand. A command group module lists its commands in ``COMMANDS``, which an
    ``opsgate.commands`` entry point names (pyproject.toml); ``run`` returns the exit code.
    Heavy imports belong inside ``add_arguments`` and ``run``, so ``--help`` stays fast."""

    name: str
    summary: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url", metavar="URL",
        help="SQLAlchemy URL, e.g. sqlite:///./opsgate.db or postgresql://user@host/db "
             "(default: $OPSGATE_DATABASE_URL, else sqlite:///./opsgate.db)",
    )


def first_line(exc: BaseException) -> str:
    """The first line of what went wrong (a database driver's own error when there is one)."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def shown(url: str) -> str:
    """The URL as it may be printed: without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
