"""Slack's Web API as the sandbox plays it: ``/api/<method>`` with the bot token, arguments as a
query string, a form or JSON (the three ways slack_sdk sends them), answers shaped like Slack's
(``{"ok": true, …}`` or ``{"ok": false, "error": code}`` with HTTP 200); and the ``response_url``
targets of slash commands and clicks."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bot.sandbox.streams import Stream, checked_chunks
from bot.sandbox.workspace import (
    APP_ID,
    BOT,
    BOT_ID,
    CHANNEL_ID,
    CHANNEL_NAME,
    TEAM_DOMAIN,
    TEAM_ID,
    Blocks,
    ResponseTarget,
    SlackError,
    Workspace,
)

Args = dict[str, Any]
Method = Callable[[Workspace, Args], Args]
# JSON strings when sent as a form
JSON_ARGS = ("blocks", "view", "attachments", "metadata", "chunks")


def parse_args(query: dict[str, str], body: bytes, content_type: str) -> Args:
    """The call's arguments from wherever slack_sdk put them."""
    from urllib.parse import parse_qsl

    args: Args = dict(query)
    if body:
        if content_type.startswith("application/json"):
            loaded = json.loads(body)
            if not isinstance(loaded, dict):
                raise SlackError("invalid_json")
            args.update(loaded)
        else:
            args.update(parse_qsl(body.decode(), keep_blank_values=True))
    for name in JSON_ARGS:
        if isinstance(args.get(name), str) and args[name]:
            try:
                args[name] = json.loads(args[name])
            except ValueError:
                raise SlackError(f"invalid_{name}") from None
    return args


def call(workspace: Workspace, method: str, authorization: str | None, args: Args) -> Args:
    """Answer one Web API call as Slack would."""
    if not authorization:
        return {"ok": False, "error": "not_authed"}
    if authorization.removeprefix("Bearer ").strip() != workspace.bot_token:
        return {"ok": False, "error": "invalid_auth"}
    workspace.record_call(method, args)
    handler = METHODS.get(method)
    if handler is None:
        return {"ok": False, "error": "unknown_method"}
    try:
        return {"ok": True, **handler(workspace, args)}
    except SlackError as failed:
        return {"ok": False, "error": failed.code}


MAX_BLOCKS = 50  # Slack's Block Kit limits a message is refused beyond (invalid_blocks)
TEXT_LIMITS = {"section": 3000, "header": 150}


def _text_and_blocks(args: Args) -> tuple[str, Blocks | None]:
    text, blocks = args.get("text"), args.get("blocks")
    if not text and not blocks:
        raise SlackError("no_text")
    if blocks is not None and (not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS or
                               any(_too_long(block) for block in blocks)):
        raise SlackError("invalid_blocks")
    return str(text or ""), blocks


def _too_long(block: object) -> bool:
    if not isinstance(block, dict):
        return True
    limit, text = TEXT_LIMITS.get(str(block.get("type"))), block.get("text")
    return limit is not None and isinstance(text, dict) and len(str(text.get("text"))) > limit


def _required(args: Args, name: str) -> str:
    value = args.get(name)
    if not value:
        raise SlackError(f"missing_{name}" if name != "channel" else "channel_not_found")
    return str(value)


# -- methods ---------------------------------------------------------------------------------


def auth_test(_workspace: Workspace, _args: Args) -> Args:
    return {"url": f"https://{TEAM_DOMAIN}.slack.com/", "team": "opsgate sandbox",
            "user": BOT.name, "team_id": TEAM_ID, "user_id": BOT.id, "bot_id": BOT_ID,
            "is_enterprise_install": False}


def post_message(workspace: Workspace, args: Args) -> Args:
    channel = workspace.channel(_required(args, "channel"))
    text, blocks = _text_and_blocks(args)
    message = workspace.post(BOT.id, text, blocks, thread_ts=args.get("thread_ts") or None)
    return {"channel": channel, "ts": message.ts, "message": message.as_slack()}


def update(workspace: Workspace, args: Args) -> Args:
    channel = workspace.channel(_required(args, "channel"))
    ts = _required(args, "ts")
    text, blocks = _text_and_blocks(args)
    if workspace.message(ts).user != BOT.id:
        raise SlackError("cant_update_message")
    message = workspace.update(ts, text, blocks)
    return {"channel": channel, "ts": ts, "text": message.text, "message": message.as_slack()}


def start_stream(workspace: Workspace, args: Args) -> Args:
    """A streamed reply in a thread, for one person (required in a channel)."""
    channel = workspace.channel(_required(args, "channel"))
    thread_ts = _required(args, "thread_ts")
    if not (args.get("recipient_user_id") and args.get("recipient_team_id")):
        raise SlackError("invalid_arguments")
    chunks = checked_chunks(args.get("chunks"))
    stream = Stream("", workspace.person(str(args["recipient_user_id"])).id)
    stream.apply(chunks)
    message = workspace.post(BOT.id, stream.fallback(), stream.blocks(), thread_ts=thread_ts)
    stream.ts = message.ts
    workspace.streams[message.ts] = stream
    return {"channel": channel, "ts": message.ts}


def append_stream(workspace: Workspace, args: Args, *, stop: bool = False) -> Args:
    channel = workspace.channel(_required(args, "channel"))
    stream = workspace.streams.get(_required(args, "ts"))
    if not isinstance(stream, Stream) or stream.stopped:
        raise SlackError("message_not_in_streaming_state")
    stream.apply(checked_chunks(args.get("chunks")))
    if stop:
        _, bottom = _text_and_blocks({"text": "-", "blocks": args.get("blocks")})
        stream.bottom, stream.stopped = list(bottom or []), True
    workspace.update(stream.ts, stream.fallback(), stream.blocks())
    return {"channel": channel, "ts": stream.ts}


def post_ephemeral(workspace: Workspace, args: Args) -> Args:
    workspace.channel(_required(args, "channel"))
    user = workspace.person(_required(args, "user")).id
    text, blocks = _text_and_blocks(args)
    message = workspace.post(BOT.id, text, blocks, thread_ts=args.get("thread_ts") or None,
                             visible_to=user)
    return {"message_ts": message.ts}


def views_open(workspace: Workspace, args: Args) -> Args:
    view = args.get("view")
    if not isinstance(view, dict) or view.get("type") != "modal":
        raise SlackError("invalid_arguments")
    opened = workspace.open_view(_required(args, "trigger_id"), view)
    return {"view": opened.as_slack()}


def views_update(workspace: Workspace, args: Args) -> Args:
    view = args.get("view")
    if not isinstance(view, dict):
        raise SlackError("invalid_arguments")
    return {"view": workspace.replace_view(_required(args, "view_id"), view).as_slack()}


def users_info(workspace: Workspace, args: Args) -> Args:
    return {"user": workspace.person(_required(args, "user")).as_slack_user()}


def conversations_info(workspace: Workspace, args: Args) -> Args:
    channel = workspace.channel(_required(args, "channel"))
    return {"channel": {"id": channel, "name": CHANNEL_NAME, "is_channel": True,
                        "is_private": False, "is_member": True, "is_archived": False,
                        "context_team_id": TEAM_ID}}


def conversations_members(workspace: Workspace, args: Args) -> Args:
    """Everyone of the workspace is in its one channel."""
    workspace.channel(_required(args, "channel"))
    return {"members": list(workspace.people), "response_metadata": {"next_cursor": ""}}


def conversations_replies(workspace: Workspace, args: Args) -> Args:
    workspace.channel(_required(args, "channel"))
    thread = workspace.thread(_required(args, "ts"))
    if not thread:
        raise SlackError("thread_not_found")
    return {"messages": [m.as_slack() for m in thread], "has_more": False}


def get_permalink(workspace: Workspace, args: Args) -> Args:
    ts = workspace.message(_required(args, "message_ts")).ts
    return {"channel": CHANNEL_ID,
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/archives/{CHANNEL_ID}/p{ts}"}


def bots_info(_workspace: Workspace, _args: Args) -> Args:
    return {"bot": {"id": BOT_ID, "app_id": APP_ID, "user_id": BOT.id, "name": BOT.name,
                    "deleted": False}}


METHODS: dict[str, Method] = {
    "auth.test": auth_test,
    "bots.info": bots_info,
    "chat.postMessage": post_message,
    "chat.update": update,
    "chat.postEphemeral": post_ephemeral,
    "chat.startStream": start_stream,
    "chat.appendStream": append_stream,
    "chat.stopStream": lambda workspace, args: append_stream(workspace, args, stop=True),
    "chat.getPermalink": get_permalink,
    "views.open": views_open,
    "views.update": views_update,
    "users.info": users_info,
    "conversations.info": conversations_info,
    "conversations.members": conversations_members,
    "conversations.replies": conversations_replies,
}


# -- response_url ----------------------------------------------------------------------------


def respond(workspace: Workspace, token: str, body: Args) -> Args:
    """A post to a ``response_url``: replace or delete the clicked message, or post a new one
    (ephemeral to the person who acted unless ``response_type`` is ``in_channel``)."""
    target = workspace.responses.get(token)
    if target is None:
        raise SlackError("expired_url")
    if body.get("delete_original") and target.message_ts:
        workspace.delete(target.message_ts)
        return {}
    text, blocks = str(body.get("text") or ""), body.get("blocks")
    if body.get("replace_original") and target.message_ts:
        workspace.update(target.message_ts, text, blocks)
        return {}
    if not text and not blocks:
        raise SlackError("no_text")
    _post_response(workspace, target, body, text, blocks)
    return {}


def _post_response(workspace: Workspace, target: ResponseTarget, body: Args, text: str,
                   blocks: Blocks | None) -> None:
    thread_ts = body.get("thread_ts") or target.thread_ts
    visible_to = None if body.get("response_type") == "in_channel" else target.user
    workspace.post(BOT.id, text, blocks, thread_ts=thread_ts, visible_to=visible_to)
