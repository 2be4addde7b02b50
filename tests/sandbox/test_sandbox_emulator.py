"""The Slack sandbox against a recording receiver playing the bot: what it sends is signed and
shaped as Slack's requests (checked with slack_sdk's own ``SignatureVerifier``), and its Web API
answers slack_sdk's ``WebClient`` as Slack would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs

import httpx
import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from bot.sandbox.server import Sandbox, create_sandbox_app
from bot.sandbox.serving import ThreadedServer, free_port
from bot.sandbox.workspace import APPROVER, BOT, CHANNEL_ID, OUTSIDER, REQUESTER, TEAM_ID
from tests.support.local_http import LocalServer, Reply, Seen, local_server

REJECT_MODAL = {
    "type": "modal", "callback_id": "reject_reason",
    "title": {"type": "plain_text", "text": "Reject"},
    "submit": {"type": "plain_text", "text": "Reject"},
    "blocks": [{"type": "input", "block_id": "reason",
                "label": {"type": "plain_text", "text": "Why?"},
                "element": {"type": "plain_text_input", "action_id": "text", "multiline": True}}],
}
PLAN_BLOCKS = [
    {"type": "header", "text": {"type": "plain_text", "text": "Plan: restart checkout"}},
    {"type": "actions", "block_id": "gate", "elements": [
        {"type": "button", "action_id": "approve_plan", "value": "approval-1", "style": "primary",
         "text": {"type": "plain_text", "text": "Approve"}},
        {"type": "button", "action_id": "reject_plan", "value": "approval-1", "style": "danger",
         "text": {"type": "plain_text", "text": "Reject"}}]},
]


@dataclass
class Rig:
    sandbox: Sandbox
    bot: LocalServer
    slack: WebClient

    def received(self, count: int) -> list[Seen]:
        self.sandbox.sender.wait()
        assert len(self.bot.seen) == count, [s.body[:120] for s in self.bot.seen]
        return list(self.bot.seen)

    def verified(self, seen: Seen) -> None:
        verifier = SignatureVerifier(self.sandbox.signing_secret)
        assert verifier.is_valid_request(seen.body, seen.headers)


def ack(body: bytes = b"") -> Reply:
    return Reply(200, body, {"Content-Type": "application/json"} if body else {})


@pytest.fixture
def rig() -> Iterator[Rig]:
    with local_server({"/slack/events": ack()}) as bot:
        port = free_port()
        sandbox = Sandbox(events_url=bot.url("/slack/events"), api_url="http://127.0.0.1:9",
                          public_url=f"http://127.0.0.1:{port}")
        server = ThreadedServer(create_sandbox_app(sandbox), "127.0.0.1", port, "sandbox").start()
        slack = WebClient(token=sandbox.bot_token, base_url=sandbox.web_api_url)
        try:
            yield Rig(sandbox, bot, slack)
        finally:
            sandbox.close()
            server.stop()


def payload(seen: Seen) -> dict:
    return json.loads(parse_qs(seen.body.decode())["payload"][0])


# -- events ----------------------------------------------------------------------------------


def events(seen: list[Seen]) -> dict[str, dict]:
    """The events received, by type."""
    bodies = [json.loads(one.body) for one in seen]
    assert all(body["type"] == "event_callback" for body in bodies)
    return {body["event"]["type"]: body for body in bodies}


def test_a_mention_is_a_signed_app_mention_and_a_message_event(rig):
    said = rig.sandbox.sender.say(REQUESTER.id, "@opsgate checkout p95 is over 2 s")
    seen = rig.received(2)
    for one in seen:
        rig.verified(one)
        assert one.headers["content-type"] == "application/json"
        assert "x-slack-retry-num" not in one.headers
    by_type = events(seen)
    assert set(by_type) == {"app_mention", "message"}
    assert by_type["app_mention"]["event_id"] != by_type["message"]["event_id"]
    for body in by_type.values():
        event = body["event"]
        assert body["event_id"].startswith("Ev") and event["user"] == REQUESTER.id
        assert event["text"] == f"<@{BOT.id}> checkout p95 is over 2 s"
        assert event["ts"] == said.ts and event["channel"] == CHANNEL_ID
        assert "thread_ts" not in event


def test_a_reply_in_a_thread_is_a_message_event_with_its_thread(rig):
    parent = rig.slack.chat_postMessage(channel=CHANNEL_ID, text="Case opened")
    reply = rig.sandbox.sender.say(APPROVER.id, "looking at it", thread_ts=parent["ts"])
    (seen,) = rig.received(1)
    rig.verified(seen)
    event = json.loads(seen.body)["event"]
    assert event["type"] == "message" and event["thread_ts"] == parent["ts"]
    assert event["ts"] == reply.ts and event["user"] == APPROVER.id
    assert event["channel_type"] == "channel"


def test_chaos_delivers_every_event_four_times_with_retry_headers(rig):
    rig.sandbox.sender.chaos = True
    rig.sandbox.sender.say(REQUESTER.id, "@opsgate help")
    seen = rig.received(8)
    by_event: dict[str, list[Seen]] = {}
    for one in seen:
        rig.verified(one)
        by_event.setdefault(json.loads(one.body)["event_id"], []).append(one)
    assert len(by_event) == 2  # the app_mention and the message, each 4 times
    for deliveries in by_event.values():
        retries = sorted(one.headers.get("x-slack-retry-num", "0") for one in deliveries)
        assert retries == ["0", "1", "2", "3"]
        reasons = {one.headers.get("x-slack-retry-reason") for one in deliveries}
        assert reasons == {None, "http_timeout"}
        assert len({one.body for one in deliveries}) == 1  # the same body, signed again


def test_a_bad_signing_secret_does_not_verify(rig):
    rig.sandbox.sender.say(REQUESTER.id, "anyone around?")
    (seen,) = rig.received(1)
    assert not SignatureVerifier("not-the-secret").is_valid_request(seen.body, seen.headers)


# -- slash commands and response URLs --------------------------------------------------------


def test_a_slash_command_is_a_signed_form_with_a_response_url(rig):
    rig.sandbox.sender.command(OUTSIDER.id, "/case status 1a2b")
    (seen,) = rig.received(1)
    rig.verified(seen)
    form = {k: v[0] for k, v in parse_qs(seen.body.decode()).items()}
    assert form["command"] == "/case" and form["text"] == "status 1a2b"
    assert form["user_id"] == OUTSIDER.id and form["channel_id"] == CHANNEL_ID
    reply = httpx.post(form["response_url"], json={"text": "case 1a2b: WAIT_GATE"})
    assert reply.status_code == 200
    workspace = rig.sandbox.workspace
    assert [m.text for m in workspace.visible(OUTSIDER.id)] == ["case 1a2b: WAIT_GATE"]
    assert workspace.visible(REQUESTER.id) == []  # ephemeral: only the asker sees it


def test_a_slash_command_ack_with_text_is_shown_to_the_asker(rig):
    rig.bot.routes["/slack/events"] = ack(b'{"text": "Usage: /case new <title>"}')
    rig.sandbox.sender.command(REQUESTER.id, "/case help")
    rig.received(1)
    (shown,) = rig.sandbox.workspace.visible(REQUESTER.id)
    assert shown.text == "Usage: /case new <title>" and shown.visible_to == REQUESTER.id


def test_an_unknown_response_url_is_refused(rig):
    reply = httpx.post(f"{rig.sandbox.public_url}/response/nope", json={"text": "x"})
    assert reply.status_code == 404


def test_a_reaction_added_is_a_signed_reaction_added_event(rig):
    card = rig.slack.chat_postMessage(channel=CHANNEL_ID, text="the case card")
    said = rig.sandbox.sender.say(APPROVER.id, "db-2 is a replica", thread_ts=card["ts"])
    rig.received(1)
    rig.sandbox.sender.react(OUTSIDER.id, said.ts, "pushpin")
    rig.sandbox.sender.react(OUTSIDER.id, said.ts, "pushpin")  # already there: no event
    rig.sandbox.sender.react(OUTSIDER.id, said.ts, "pushpin", on=False)  # no reaction_removed
    rig.sandbox.sender.react(REQUESTER.id, card["ts"], "pushpin")
    seen = rig.received(3)[1:]
    for one in seen:
        rig.verified(one)
    bodies = [json.loads(one.body) for one in seen]  # sent at once: in any order
    assert [b["event"]["type"] for b in bodies] == ["reaction_added"] * 2
    by_user = {b["event"]["user"]: b["event"] for b in bodies}
    first = by_user[OUTSIDER.id]
    assert first["reaction"] == "pushpin"
    assert first["item"] == {"type": "message", "channel": CHANNEL_ID, "ts": said.ts}
    assert first["item_user"] == APPROVER.id and by_user[REQUESTER.id]["item_user"] == BOT.id
    shown = rig.slack.conversations_replies(channel=CHANNEL_ID, ts=card["ts"])["messages"]
    assert shown[0]["reactions"] == [{"name": "pushpin", "users": [REQUESTER.id], "count": 1}]
    assert "reactions" not in shown[1]  # taken back
    # the page sends a person's reactions the same way
    page = httpx.post(f"{rig.sandbox.public_url}/sandbox/react",
                      json={"user": APPROVER.id, "message_ts": card["ts"], "reaction": "eyes"})
    assert page.status_code == 202
    assert json.loads(rig.received(4)[-1].body)["event"]["reaction"] == "eyes"


def test_an_update_replaces_the_message_in_place_within_block_kit_limits(rig):
    card = rig.slack.chat_postMessage(channel=CHANNEL_ID, text="NEW", blocks=PLAN_BLOCKS[:1])
    closed = {"type": "section", "text": {"type": "mrkdwn", "text": "*CLOSED*"}}
    rig.slack.chat_update(channel=CHANNEL_ID, ts=card["ts"], text="CLOSED", blocks=[closed])
    state = httpx.get(f"{rig.sandbox.public_url}/sandbox/state", params={"user": APPROVER.id})
    [message] = state.json()["messages"]
    assert (message["ts"], message["text"]) == (card["ts"], "CLOSED")
    assert message["edited"] and message["blocks"][0]["text"]["text"] == "*CLOSED*"
    too_long = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
    for blocks in ([too_long], [PLAN_BLOCKS[0]] * 51):
        with pytest.raises(SlackApiError) as refused:
            rig.slack.chat_update(channel=CHANNEL_ID, ts=card["ts"], text="x", blocks=blocks)
        assert refused.value.response["error"] == "invalid_blocks"


# -- the Web API -----------------------------------------------------------------------------


def test_web_api_answers_slack_sdk_like_slack(rig):
    slack = rig.slack
    assert slack.auth_test()["user_id"] == BOT.id
    parent = slack.chat_postMessage(channel=CHANNEL_ID, text="Case opened", blocks=PLAN_BLOCKS)
    reply = slack.chat_postMessage(channel="#incident", text="step 1 ok", thread_ts=parent["ts"])
    assert reply["message"]["thread_ts"] == parent["ts"]
    slack.chat_update(channel=CHANNEL_ID, ts=parent["ts"], text="Approved by alice", blocks=[])
    ephemeral = slack.chat_postEphemeral(channel=CHANNEL_ID, user=OUTSIDER.id, text="not you")
    assert ephemeral["message_ts"]
    assert slack.users_info(user=APPROVER.id)["user"]["name"] == "alice"
    assert slack.conversations_info(channel=CHANNEL_ID)["channel"]["name"] == "incident"
    replies = slack.conversations_replies(channel=CHANNEL_ID, ts=parent["ts"])["messages"]
    assert [m["text"] for m in replies] == ["Approved by alice", "step 1 ok"]
    methods = [method for method, _args in rig.sandbox.workspace.calls]
    assert methods[:3] == ["auth.test", "chat.postMessage", "chat.postMessage"]


def test_a_stream_is_drawn_as_one_plan_its_tasks_moving_until_it_stops(rig):
    """``chat.startStream`` in plan mode, ``appendStream`` task updates, ``stopStream``: the
    message shows one plan block whose tasks move pending → in progress → complete or error."""
    slack = rig.slack
    parent = slack.chat_postMessage(channel=CHANNEL_ID, text="checkout 5xx")
    with pytest.raises(SlackApiError) as refused:  # in a channel, a stream is for one person
        slack.chat_startStream(channel=CHANNEL_ID, thread_ts=parent["ts"])
    assert refused.value.response["error"] == "invalid_arguments"
    look = {"type": "task_update", "id": "look_1", "title": "Reading the pods of checkout"}
    started = slack.chat_startStream(
        channel=CHANNEL_ID, thread_ts=parent["ts"], recipient_user_id=REQUESTER.id,
        recipient_team_id=TEAM_ID, task_display_mode="plan",
        chunks=[{"type": "plan_update", "title": "Investigating"},
                {**look, "status": "in_progress"}])

    def plan() -> dict:
        state = httpx.get(f"{rig.sandbox.public_url}/sandbox/state",
                          params={"user": REQUESTER.id}).json()
        [message] = [m for m in state["messages"] if m["ts"] == started["ts"]]
        assert message["thread_ts"] == parent["ts"]
        [block] = message["blocks"]
        return block

    assert plan()["type"] == "plan" and plan()["tasks"][0]["status"] == "in_progress"
    slack.chat_appendStream(channel=CHANNEL_ID, ts=started["ts"], chunks=[
        {**look, "status": "complete", "output": "2 pod(s), all ready"},
        {"type": "task_update", "id": "look_2", "title": "Reading the alerts",
         "status": "error", "output": "no Alertmanager is configured"}])
    with pytest.raises(SlackApiError) as bad:
        slack.chat_appendStream(channel=CHANNEL_ID, ts=started["ts"], chunks=[
            {**look, "status": "completed"}])
    assert bad.value.response["error"] == "invalid_chunks"
    slack.chat_stopStream(channel=CHANNEL_ID, ts=started["ts"],
                          chunks=[{"type": "plan_update", "title": "What opsgate looked at"}])
    drawn = plan()
    assert drawn["title"] == "What opsgate looked at"
    assert [(t["task_id"], t["status"]) for t in drawn["tasks"]] == [
        ("look_1", "complete"), ("look_2", "error")]
    assert drawn["tasks"][1]["output"]["elements"][0]["elements"][0]["text"] == \
        "no Alertmanager is configured"
    with pytest.raises(SlackApiError) as stopped:
        slack.chat_appendStream(channel=CHANNEL_ID, ts=started["ts"], chunks=[look])
    assert stopped.value.response["error"] == "message_not_in_streaming_state"


@pytest.mark.parametrize(("call", "error"), [
    (lambda s: s.chat_postMessage(channel="C0NOPE", text="x"), "channel_not_found"),
    (lambda s: s.chat_update(channel=CHANNEL_ID, ts="1.000001", text="x"), "message_not_found"),
    (lambda s: s.users_info(user="U0NOPE"), "user_not_found"),
    (lambda s: s.views_open(trigger_id="made.up", view=REJECT_MODAL), "invalid_trigger_id"),
    (lambda s: s.api_call("chat.scheduleMessage"), "unknown_method"),
])
def test_web_api_errors_are_slacks(rig, call, error):
    with pytest.raises(SlackApiError) as failed:
        call(rig.slack)
    assert failed.value.response["error"] == error


def test_web_api_refuses_another_token(rig):
    other = WebClient(token="xoxb-someone-else", base_url=rig.sandbox.web_api_url)
    with pytest.raises(SlackApiError) as failed:
        other.auth_test()
    assert failed.value.response["error"] == "invalid_auth"
    assert rig.sandbox.workspace.calls == []


# -- clicks and modals -----------------------------------------------------------------------


def test_a_click_is_a_signed_block_actions_payload(rig):
    plan = rig.slack.chat_postMessage(channel=CHANNEL_ID, text="plan", blocks=PLAN_BLOCKS)
    rig.sandbox.sender.click(APPROVER.id, plan["ts"], "approve_plan")
    (seen,) = rig.received(1)
    rig.verified(seen)
    clicked = payload(seen)
    assert clicked["type"] == "block_actions" and clicked["user"]["id"] == APPROVER.id
    (action,) = clicked["actions"]
    assert (action["action_id"], action["value"], action["block_id"]) == \
        ("approve_plan", "approval-1", "gate")
    assert clicked["container"]["message_ts"] == plan["ts"]
    assert clicked["message"]["blocks"][1]["elements"][0]["text"]["text"] == "Approve"
    httpx.post(clicked["response_url"], json={"replace_original": True, "text": "Approved"})
    assert rig.sandbox.workspace.message(plan["ts"]).text == "Approved"


def test_chaos_sends_every_click_twice(rig):
    plan = rig.slack.chat_postMessage(channel=CHANNEL_ID, text="plan", blocks=PLAN_BLOCKS)
    rig.sandbox.sender.chaos = True
    rig.sandbox.sender.click(APPROVER.id, plan["ts"], "approve_plan")
    seen = rig.received(2)
    assert [payload(s)["actions"][0]["action_id"] for s in seen] == ["approve_plan"] * 2


def test_reject_modal_round_trip(rig):
    plan = rig.slack.chat_postMessage(channel=CHANNEL_ID, text="plan", blocks=PLAN_BLOCKS)
    sender, workspace = rig.sandbox.sender, rig.sandbox.workspace
    sender.click(APPROVER.id, plan["ts"], "reject_plan")
    (clicked,) = rig.received(1)
    opened = rig.slack.views_open(trigger_id=payload(clicked)["trigger_id"], view=REJECT_MODAL)
    view_id = opened["view"]["id"]
    assert [v.id for v in workspace.views_of(APPROVER.id)] == [view_id]
    assert workspace.views_of(REQUESTER.id) == []
    rig.bot.routes["/slack/events"] = ack(
        b'{"response_action": "errors", "errors": {"reason": "Say why"}}')
    sender.submit(APPROVER.id, view_id, {"reason": {"text": ""}})
    rig.received(2)
    assert workspace.views[view_id].errors == {"reason": "Say why"}
    rig.bot.routes["/slack/events"] = ack()
    sender.submit(APPROVER.id, view_id, {"reason": {"text": "wrong service"}})
    submitted = payload(rig.received(3)[-1])
    rig.verified(rig.bot.seen[-1])
    assert submitted["type"] == "view_submission"
    assert submitted["view"]["callback_id"] == "reject_reason"
    assert submitted["view"]["state"]["values"] == {
        "reason": {"text": {"type": "plain_text_input", "value": "wrong service"}}}
    assert workspace.views_of(APPROVER.id) == []


# -- the page's endpoints --------------------------------------------------------------------


def test_page_and_state_show_each_person_their_own_view(rig):
    base = rig.sandbox.public_url
    assert "opsgate" in httpx.get(f"{base}/").text
    assert httpx.get(f"{base}/page/app.js").status_code == 200
    assert httpx.post(f"{base}/sandbox/say",
                      json={"user": REQUESTER.id, "text": "@opsgate hello"}).status_code == 202
    rig.slack.chat_postEphemeral(channel=CHANNEL_ID, user=REQUESTER.id, text="only riley")
    mine = httpx.get(f"{base}/sandbox/state", params={"user": REQUESTER.id}).json()
    theirs = httpx.get(f"{base}/sandbox/state", params={"user": APPROVER.id}).json()
    assert [m["text"] for m in mine["messages"]] == [f"<@{BOT.id}> hello", "only riley"]
    assert [m["text"] for m in theirs["messages"]] == [f"<@{BOT.id}> hello"]
    assert {p["id"] for p in mine["people"]} == {REQUESTER.id, APPROVER.id, OUTSIDER.id}
    turned = httpx.post(f"{base}/sandbox/chaos", json={"on": True})
    assert turned.json() == {"chaos": True} and rig.sandbox.sender.chaos
    unknown = httpx.post(f"{base}/sandbox/say", json={"user": "U0NOPE", "text": "hi"})
    assert unknown.status_code == 400 and unknown.json()["error"] == "user_not_found"


def test_the_stream_announces_each_change(rig):
    base = rig.sandbox.public_url
    with httpx.stream("GET", f"{base}/sandbox/stream", timeout=5) as stream:
        lines = stream.iter_lines()
        first = next(lines)
        assert first.startswith("data: ")
        rig.slack.chat_postMessage(channel=CHANNEL_ID, text="Case opened")
        later = next(line for line in lines if line.startswith("data: "))
        assert int(later.removeprefix("data: ")) > int(first.removeprefix("data: "))
