"""The bot's one error handler: a known opsgate error (a refusal, a missing case) becomes an
ephemeral message saying why; anything else (an ``InternalError`` too) is logged with the
correlation id and the user sees a short apology naming it, never a stack trace. Every ephemeral
goes through the gateway, once per Slack request: a retried request tells the user once."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from slack_sdk.errors import SlackApiError

from bot.mrkdwn import escape
from bot.people import as_is, mentions_in
from core.errors import InternalError, OpsgateError
from core.gateway import ToolCall

if TYPE_CHECKING:
    from bot.cases import SlackCases

log = logging.getLogger(__name__)


def correlation_id(body: dict[str, Any]) -> str:
    """The id that ties one Slack request to its logs and timeline rows."""
    return str(body.get("event_id") or body.get("trigger_id") or uuid4().hex)


def failure_text(error: BaseException, correlation: str) -> str:
    """What the user reads about ``error``, as plain words (a refusal may quote what was asked:
    ``escape`` it for mrkdwn); unknown errors are logged here."""
    if isinstance(error, OpsgateError) and not isinstance(error, InternalError):
        log.info("slack request %s refused: %s %s", correlation, error.code, error.message)
        return f"⛔ {error.message}"
    log.error("slack request %s failed", correlation, exc_info=error)
    return f"Sorry, that did not work (reference `{correlation}`). Nothing was changed twice."


def where_to_answer(body: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(channel, user, thread_ts) of the person a request came from."""
    event = body.get("event") or {}
    channel = (body.get("channel") or {}).get("id") or body.get("channel_id") \
        or event.get("channel")
    user = (body.get("user") or {}).get("id") or body.get("user_id") or event.get("user")
    message = body.get("message") or {}
    thread = message.get("thread_ts") or event.get("thread_ts") or event.get("ts")
    return channel, user, thread


def tell(cases: SlackCases, body: dict[str, Any], said: str) -> None:
    """An ephemeral message (``said``, plain words) to whoever sent ``body``, in the channel (and
    thread) they used, through the gateway once per Slack request (its event or trigger id)."""
    channel, user, thread = where_to_answer(body)
    text = mentions_in(escape(said), getattr(cases, "people", as_is))  # Slack names people
    if channel is None or user is None:
        log.warning("no channel or user to tell: %s", text)
        return
    args = {"channel": channel, "user": user, "thread_ts": thread, "text": text}
    call = ToolCall(tool="chat.postEphemeral", args=args, actor="slack-bot",
                    session_id=f"slack:{channel}", business_key=f"tell:{correlation_id(body)}")

    def post(_args: Any) -> dict[str, Any]:
        reply = cases.client.chat_postEphemeral(
            channel=channel, user=user, text=text, thread_ts=thread,
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}])
        return {"message_ts": reply.get("message_ts")}

    try:
        result = cases.app.gateway.run(call, post, wait_s=5.0)
    except SlackApiError as exc:
        log.warning("could not tell %s in %s: %s", user, channel, exc.response.get("error"))
        return
    except OpsgateError as exc:  # the ledger is down: the error handler itself must not fail
        log.warning("could not tell %s in %s: %s", user, channel, exc.message)
        return
    if result.error is not None:
        log.warning("did not tell %s in %s again: %s", user, channel, result.error)


def report(error: BaseException, body: dict[str, Any], cases: SlackCases) -> None:
    """Handle ``error`` raised while serving ``body``: the one place refusals reach users."""
    tell(cases, body, failure_text(error, correlation_id(body)))
