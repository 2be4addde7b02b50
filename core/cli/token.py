"""``opsgate token create|list|revoke``: the API principals an operator hands out. A new token is
printed once, alone on stdout (so ``$(opsgate token create ci)`` captures it); the database keeps
only its SHA-256, and nothing prints a hash or a token again."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from core.cli.app import opened_app, settings_of
from core.cli.command import Command, database_option

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from core.principals import Principal, PrincipalRecord


def token_arguments(parser: argparse.ArgumentParser) -> None:
    """The three actions, each with its own ``--database-url``."""
    from core.principals import ROLES

    actions = parser.add_subparsers(dest="principal_action", metavar="ACTION", required=True)
    made = actions.add_parser(
        "create", help="create a principal and print its token once",
        description="Create a named principal and print its new token once, on stdout. "
                    "Roles: reader (reads), operator (reads and writes, never through the "
                    "gate), approver (an operator who approves and rejects plans; needs "
                    "--slack-user, the person's Slack id, under which their approvals count "
                    "whatever the channel). A name is given out once: --rotate gives an "
                    "existing principal a new token instead.")
    made.add_argument("name", metavar="NAME", help="lower case: a-z, 0-9, '.', '_', '-'")
    made.add_argument("--role", choices=ROLES,
                      help="what the token may do (default: operator)")
    made.add_argument("--slack-user", metavar="U…",
                      help="the person's Slack user id: makes the principal a person")
    made.add_argument("--channel", metavar="C…", action="append", dest="channels",
                      help="scope the token to this Slack channel's cases (repeat for more): "
                           "every other case answers 404, as an unknown one; without it the "
                           "token sees every case")
    made.add_argument("--rotate", action="store_true",
                      help="NAME exists: give it a new token (printed once) and end the old "
                           "one; its role, Slack user and channels stay")
    database_option(made)
    listed = actions.add_parser("list", help="list principals (never tokens or hashes)",
                                description="Every principal: name, role, kind, Slack user, "
                                            "created and revoked times.")
    database_option(listed)
    revoked = actions.add_parser("revoke", help="revoke a principal's token",
                                 description="Revoke NAME's token: from now on it is 401. "
                                             "The name is never given out again.")
    revoked.add_argument("name", metavar="NAME")
    database_option(revoked)


def run_token(args: argparse.Namespace) -> int:
    # stdout is the new token alone, for $(opsgate token create …): the schema's lines go to
    # stderr. The principals live in the database alone: nothing is plugged in.
    with opened_app(settings_of(args), plugged=False, notes=sys.stderr) as app:
        return _act(app.engine, args, sys.stdout, sys.stderr)


def _act(engine: Engine, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from core.principals import create, records, revoke, rotate

    if args.principal_action == "create" and args.rotate:
        principal, token = rotate(engine, args.name, args.role, args.slack_user,
                                  channels=args.channels)
        print(token, file=out, flush=True)
        print(f"token: rotated {_who(principal)}: its old token is refused from now on; the "
              "token above is shown once: opsgate keeps only its SHA-256", file=err, flush=True)
    elif args.principal_action == "create":
        principal, token = create(engine, args.name, args.role or "operator", args.slack_user,
                                  channels=args.channels)
        print(token, file=out, flush=True)
        print(f"token: created {_who(principal)}; the token above is shown once: opsgate keeps "
              "only its SHA-256", file=err, flush=True)
    elif args.principal_action == "list":
        print(_table(records(engine)), file=out, flush=True)
    else:
        done = "revoked" if revoke(engine, args.name) else "was already revoked"
        print(f"token: {args.name} {done}", file=out, flush=True)
    return 0


def _who(principal: Principal) -> str:
    slack = f", Slack {principal.slack_user}" if principal.slack_user else ""
    scope = "" if principal.channels is None else \
        f"; only the cases of {', '.join(sorted(principal.channels))}"
    return f"{principal.name} ({principal.role}, {principal.kind}{slack}{scope})"


def _table(rows: list[PrincipalRecord]) -> str:
    if not rows:
        return "no principals (`opsgate token create NAME` makes one)"
    header = ("NAME", "ROLE", "KIND", "SLACK USER", "CHANNELS", "CREATED", "REVOKED")
    lines = [header] + [(
        row.principal.name, row.principal.role, row.principal.kind,
        row.principal.slack_user or "-",
        "all" if row.principal.channels is None else ",".join(sorted(row.principal.channels)),
        _moment(row.created_at), _moment(row.revoked_at),
    ) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                     .rstrip() for line in lines)


def _moment(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


COMMANDS = (
    Command(
        name="token",
        summary="create, list or revoke the API's principals (bearer tokens)",
        description="REST callers are principals named by their bearer token, each a reader, "
                    "operator or approver; an approver is a person linked to their Slack id. "
                    "`opsgate token create NAME [--role R] [--slack-user U…] [--channel C…]` "
                    "prints a new "
                    "token once (the database keeps only its SHA-256; `--rotate`: a new "
                    "token for an existing NAME, the old one ends); `opsgate token list` "
                    "shows principals, never tokens; `opsgate token revoke NAME` ends one.",
        add_arguments=token_arguments,
        run=run_token,
    ),
)
