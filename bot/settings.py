"""The Slack front end's settings (docs/slack.md), contributed to every opsgate process through
``Extensions.settings`` and read with ``app.settings.layer(SlackSettings)``. No bot token: Slack
is off."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr

from core.settings import OpsgateSettings
from core.settings.forms import HttpUrl, SlackChannelId


class SlackSettings(OpsgateSettings):
    """The bot's tokens, Slack's address, the incident channel and the bot's workers."""

    slack_bot_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("slack_bot_token", "SLACK_BOT_TOKEN"),
        description="Bot token (xoxb-…) the bot calls the Web API with (SLACK_BOT_TOKEN).",
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("slack_signing_secret", "SLACK_SIGNING_SECRET"),
        description="Signing secret that verifies Slack's HTTP requests (SLACK_SIGNING_SECRET).",
    )
    slack_app_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("slack_app_token", "SLACK_APP_TOKEN"),
        description="App-level token (xapp-…) for `opsgate serve --socket-mode` (SLACK_APP_TOKEN).",
    )
    slack_api_url: HttpUrl = Field(
        default="https://slack.com/api/",
        description="Base URL of Slack's Web API, ending in '/' (a local sandbox or test server).",
    )
    incident_channel: SlackChannelId | None = Field(
        default=None,
        description="Channel id (C012AB3CD, not #incident) where cases opened outside Slack "
        "(REST, alerts) get their thread.",
    )
    slack_workers: int = Field(
        default=16, ge=1, le=512,
        description="Threads that run the slow part of Slack requests (the agent) after the ack.",
    )
    pin_reaction: str = Field(
        default="pushpin", pattern=r"^:?[a-z0-9_+'-]+:?$",
        description="The reaction (emoji name, e.g. pushpin or :pushpin:) that pins a message of "
        "a case's thread to the case's timeline.",
    )
