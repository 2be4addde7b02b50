"""What the agent and the Slack bot plug into every ``opsgate`` process: ``product_extensions``,
named by the ``opsgate.extensions`` entry point in pyproject.toml (the core never imports the
outer layers; this is where they meet). ``python -m bot.cli`` is the ``opsgate`` command.

Each piece is imported when a process first builds it: a command that never bootstraps the app
never loads Slack or the agent."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from core.bootstrap import Extensions

if TYPE_CHECKING:
    from uuid import UUID

    from fastapi import FastAPI

    from core.bootstrap import App, Connection
    from core.chat import ChatSink
    from core.investigate.progress import Investigation
    from core.messaging.consumer import Consumer
    from core.policy.judge import GroupMembers
    from core.settings import Settings


def slack_chat(app: App) -> ChatSink:
    """The sink the notifier posts through: Slack when a bot token is set; otherwise every post
    is held (none is recorded as sent) until a process with Slack delivers it."""
    from bot.app import slack_configured, web_client
    from bot.settings import SlackSettings
    from bot.sink import SlackChatSink
    from bot.slack_store import SlackStore
    from core.chat import HeldChat
    from core.ops.readiness import NO_SLACK

    slack = app.settings.layer(SlackSettings)
    if not slack_configured(slack):
        return HeldChat(NO_SLACK)
    return SlackChatSink(web_client(slack), SlackStore(app.engine),
                         incident_channel=slack.incident_channel)


def slack_notifier(app: App) -> Consumer:
    from bot.notifier import SlackNotifier

    return SlackNotifier(app)


def slack_events(app: App, api: FastAPI) -> None:
    from bot.app import mount_slack_events

    mount_slack_events(app, api)


def socket_mode(app: App) -> Connection:
    from bot.socket_mode import start_socket_mode

    return start_socket_mode(app)


def approver_groups(settings: Settings) -> GroupMembers | None:
    from bot.groups import group_members

    return group_members(settings)


def thread_investigation(app: App, case_id: UUID) -> Investigation | None:
    from bot.investigation import shown_in_thread

    return shown_in_thread(app, case_id)


def product_extensions() -> Extensions:
    """What the agent and the bot plug into every opsgate process."""
    from agent import consumers as agent_consumers
    from agent.settings import AgentSettings
    from bot.settings import SlackSettings

    return Extensions(consumers={**agent_consumers(), "notifier": slack_notifier},
                      routes=(slack_events,),
                      chat=slack_chat, socket_mode=socket_mode, members=approver_groups,
                      investigation=thread_investigation,
                      settings=(SlackSettings, AgentSettings))


if __name__ == "__main__":
    from core.cli import main

    sys.exit(main())
