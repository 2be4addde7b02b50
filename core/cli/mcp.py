"""``opsgate mcp``: the case tools over the Model Context Protocol on stdio, for a desktop app
or an IDE (``core.mcp.stdio`` serves them)."""

from __future__ import annotations

import argparse
import sys
from contextlib import redirect_stdout

from core.cli.app import opened_app, settings_of
from core.cli.command import Command, database_option


def mcp_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--token", metavar="TOKEN",
                        help="act as this API token's principal (default: $OPSGATE_MCP_TOKEN; "
                             "neither: the local operator)")
    database_option(parser)


def run_mcp(args: argparse.Namespace) -> int:
    from core.mcp.stdio import serve_stdio, stdio_principal

    # stdout is the MCP wire: the schema's lines and anything said before serving go to stderr.
    with opened_app(settings_of(args), plugged=False, notes=sys.stderr) as app:
        with redirect_stdout(sys.stderr):
            principal = stdio_principal(app, args.token)
        print(f"opsgate mcp: serving the case tools on stdio as {principal.name} "
              f"({principal.role})", file=sys.stderr, flush=True)
        serve_stdio(app, args.token)
    return 0


COMMANDS = (
    Command(
        name="mcp",
        summary="serve the case tools over the Model Context Protocol on stdio",
        description="Serve opsgate's case tools (read, open, note, record findings, propose "
                    "plans; never approve or execute) to an MCP client such as a desktop app or "
                    "an IDE, on stdin/stdout, as the principal of --token or "
                    "$OPSGATE_MCP_TOKEN (else the local operator). Every write goes through the "
                    "gateway: a retried call replays. `opsgate serve` also serves them over "
                    "streamable HTTP at /mcp. See docs/mcp.md.",
        add_arguments=mcp_arguments,
        run=run_mcp,
    ),
)
