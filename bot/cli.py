"""The ``opsgate`` console script: the core's commands with the agent and the Slack bot
plugged in (the core never imports the outer layers; this is where they meet)."""

from __future__ import annotations

from collections.abc import Sequence

from core.bootstrap import Extensions


def product_extensions() -> Extensions:
    """What the agent and the bot plug into every opsgate process."""
    return Extensions()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``opsgate`` console script; returns the exit code."""
    from bot.sandbox.demo import subcommand as sandbox_demo
    from core.cli import main as core_main

    return core_main(argv, extensions=product_extensions(),
                     subcommands={"demo": sandbox_demo()})
