"""The ``opsgate`` command's one registration: every group named in pyproject.toml loads, no two
register the same command, the outer layers' extensions are found, and every command, at every
level, answers ``--help``."""

from __future__ import annotations

import argparse

import pytest

from core.bootstrap import Extensions
from core.cli import build_parser, registered_commands
from core.cli.app import plugged_in

EXPECTED = {"migrate", "serve", "demo", "relay", "consume", "outbox", "trace", "reconcile",
            "export", "mcp", "token", "eval", "catalog", "policy", "health", "library"}


def test_every_command_is_registered_once():
    names = [command.name for command in registered_commands()]
    assert sorted(names) == sorted(EXPECTED)


def test_the_outer_layers_plug_in_through_their_entry_point():
    extensions = plugged_in()
    assert isinstance(extensions, Extensions)
    assert "notifier" in extensions.consumers and extensions.socket_mode is not None


def _levels(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every command line that names a (sub)command: (), ("token",), ("token", "create")…"""
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _levels(sub, (*prefix, name))


def test_help_works_at_every_level(capsys):
    parser = build_parser(registered_commands())
    levels = list(_levels(parser))
    assert ("outbox", "dead") in levels and ("token", "create") in levels
    for level in levels:
        with pytest.raises(SystemExit) as done:
            build_parser(registered_commands()).parse_args([*level, "--help"])
        assert done.value.code == 0
        shown = capsys.readouterr().out
        assert shown.startswith(f"usage: {' '.join(('opsgate', *level))}"), shown
