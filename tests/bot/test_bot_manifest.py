"""manifest.yml is a complete Slack app manifest that matches what the code listens for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bot.app import EVENTS_PATH
from bot.ids import COMMAND, REASON_BLOCK, REASON_INPUT, Action, Subcommand, View
from bot.listeners.events import EVENTS

ROOT = Path(__file__).resolve().parents[2]


def manifest() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "manifest.yml").read_text()))


def test_manifest_declares_the_command_the_code_registers() -> None:
    commands = manifest()["features"]["slash_commands"]
    assert [c["command"] for c in commands] == [COMMAND]
    hint = commands[0]["usage_hint"]
    for subcommand in Subcommand:
        assert subcommand.value in hint
    assert commands[0]["url"].endswith(EVENTS_PATH)


def test_manifest_subscribes_to_every_event_the_code_handles() -> None:
    settings = manifest()["settings"]
    bot_events = set(settings["event_subscriptions"]["bot_events"])
    for event in EVENTS:
        assert event in bot_events or f"{event}.channels" in bot_events
    assert settings["event_subscriptions"]["request_url"].endswith(EVENTS_PATH)
    assert settings["socket_mode_enabled"] is True
    # pins: reading reactions needs its scope; a removed pin erases nothing, so no
    # reaction_removed
    assert "reaction_added" in bot_events and "reaction_removed" not in bot_events
    assert "reactions:read" in manifest()["oauth_config"]["scopes"]["bot"]


def test_manifest_enables_interactivity_for_the_buttons_and_the_modal() -> None:
    settings = manifest()["settings"]
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["interactivity"]["request_url"].endswith(EVENTS_PATH)
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    assert {"app_mentions:read", "channels:history", "chat:write", "commands"} <= scopes
    # /case asks conversations.members whether someone outside a case's channel is in it
    assert {"channels:read", "groups:read"} <= scopes


def test_every_id_the_code_uses_is_documented() -> None:
    documented = (ROOT / "docs" / "slack.md").read_text()
    for ident in (*Action, *View, REASON_BLOCK, REASON_INPUT, COMMAND):
        assert f"`{ident}`" in documented, ident


def test_manifest_is_complete() -> None:
    data = manifest()
    assert data["display_information"]["name"] == "opsgate"
    assert len(data["display_information"]["long_description"]) >= 174
    assert data["features"]["bot_user"]["display_name"]
