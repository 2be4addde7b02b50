"""``opsgate token create|list|revoke``: the API principals an operator hands out. A new token is
printed once, alone on stdout (so ``$(opsgate token create ci)`` captures it); the database keeps
only its SHA-256, and nothing prints a hash or a token again. ``core.cli`` wires the command."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

from sqlalchemy import Engine

from core.principals import ROLES, PrincipalRecord, create, records, revoke


def token_arguments(parser: argparse.ArgumentParser,
                    common: Callable[[argparse.ArgumentParser], None]) -> None:
    """The three actions; ``common`` adds the options each takes (the database URL)."""
    actions = parser.add_subparsers(dest="principal_action", metavar="ACTION", required=True)
    made = actions.add_parser(
        "create", help="create a principal and print its token once",
        description="Create a named principal and print its new token once, on stdout. "
                    "Roles: reader (reads), operator (reads and writes, never through the "
                    "gate), approver (an operator who approves and rejects plans; needs "
                    "--slack-user, the person's Slack id, under which their approvals count "
                    "whatever the channel).")
    made.add_argument("name", metavar="NAME", help="lower case: a-z, 0-9, '.', '_', '-'")
    made.add_argument("--role", choices=ROLES, default="operator",
                      help="what the token may do (default: %(default)s)")
    made.add_argument("--slack-user", metavar="U…",
                      help="the person's Slack user id: makes the principal a person")
    common(made)
    listed = actions.add_parser("list", help="list principals (never tokens or hashes)",
                                description="Every principal: name, role, kind, Slack user, "
                                            "created and revoked times.")
    common(listed)
    revoked = actions.add_parser("revoke", help="revoke a principal's token",
                                 description="Revoke NAME's token: from now on it is 401. "
                                             "The name is never given out again.")
    revoked.add_argument("name", metavar="NAME")
    common(revoked)


def run_token(engine: Engine, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.principal_action == "create":
        principal, token = create(engine, args.name, args.role, args.slack_user)
        print(token, file=out, flush=True)
        print(f"token: created {principal.name} ({principal.role}, {principal.kind}"
              f"{', Slack ' + principal.slack_user if principal.slack_user else ''}); the token "
              "above is shown once: opsgate keeps only its SHA-256", file=err, flush=True)
    elif args.principal_action == "list":
        print(_table(records(engine)), file=out, flush=True)
    else:
        done = "revoked" if revoke(engine, args.name) else "was already revoked"
        print(f"token: {args.name} {done}", file=out, flush=True)
    return 0


def _table(rows: list[PrincipalRecord]) -> str:
    if not rows:
        return "no principals (`opsgate token create NAME` makes one)"
    header = ("NAME", "ROLE", "KIND", "SLACK USER", "CREATED", "REVOKED")
    lines = [header] + [(
        row.principal.name, row.principal.role, row.principal.kind,
        row.principal.slack_user or "-", _moment(row.created_at), _moment(row.revoked_at),
    ) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                     .rstrip() for line in lines)


def _moment(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")
