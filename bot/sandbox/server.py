"""The sandbox's HTTP server: Slack's Web API and response URLs for the bot, and for people the
page (plain HTML and vanilla JS), its live updates (server-sent events) and its actions (post,
click, react, submit a modal, switch chaos on), plus the case panel read from opsgate's REST API."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from bot.event_words import event_said
from bot.people import names_in
from bot.sandbox import web_api
from bot.sandbox.sender import SlackSender
from bot.sandbox.workspace import (
    BOT,
    CHANNEL_ID,
    CHANNEL_NAME,
    PEOPLE,
    Person,
    SlackError,
    Workspace,
)

PAGE = files("bot.sandbox") / "page"
STREAM_EVERY_S = 0.1
STREAM_KEEPALIVE_S = 15.0
API_TIMEOUT_S = 5.0


@dataclass
class Sandbox:
    """A workspace, the sender that plays Slack towards the bot, and the URLs they use.
    ``api_url`` is opsgate's REST API (the case panel reads it)."""

    events_url: str
    api_url: str
    public_url: str
    signing_secret: str = field(default_factory=lambda: secrets.token_hex(16))
    bot_token: str = field(default_factory=lambda: f"xoxb-sandbox-{secrets.token_hex(12)}")
    chaos: bool = False
    workspace: Workspace = field(init=False)
    sender: SlackSender = field(init=False)
    stopping: bool = False

    def __post_init__(self) -> None:
        self.workspace = Workspace(self.bot_token)
        self.sender = SlackSender(self.workspace, self.events_url, self.signing_secret,
                                  f"{self.public_url.rstrip('/')}/response", chaos=self.chaos)

    @property
    def web_api_url(self) -> str:
        """What the bot's ``OPSGATE_SLACK_API_URL`` must be (with its trailing slash)."""
        return f"{self.public_url.rstrip('/')}/api/"

    @property
    def traffic_gateway_url(self) -> str:
        """The demo's stand-in traffic-gateway admin URL (``gateway.flip`` posts here)."""
        return f"{self.public_url.rstrip('/')}/demo/traffic-gateway"

    def close(self) -> None:
        self.stopping = True
        self.sender.close()


class Said(BaseModel):
    user: str
    text: str = Field(min_length=1, max_length=4000)
    thread_ts: str | None = None


class Clicked(BaseModel):
    user: str
    message_ts: str
    action_id: str
    block_id: str | None = None


class Reacted(BaseModel):
    user: str
    message_ts: str
    reaction: str = Field(min_length=1, max_length=100, pattern=r"^[a-z0-9_+'-]+$")
    on: bool = True


class Submitted(BaseModel):
    user: str
    view_id: str
    values: dict[str, dict[str, str]] = Field(default_factory=dict)


class Dismissed(BaseModel):
    user: str
    view_id: str


class Chaos(BaseModel):
    on: bool


def create_sandbox_app(sandbox: Sandbox) -> FastAPI:
    """The sandbox's FastAPI application (one per sandbox; nothing module-level)."""
    app = FastAPI(title="opsgate Slack sandbox", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.sandbox = sandbox
    _slack_routes(app, sandbox)
    _page_routes(app, sandbox)
    _action_routes(app, sandbox)
    _case_routes(app, sandbox)
    _stand_in_routes(app)
    return app


def _stand_in_routes(app: FastAPI) -> None:
    @app.post("/demo/traffic-gateway")
    async def traffic_gateway(request: Request) -> JSONResponse:
        """Plays a traffic gateway's admin API for ``gateway.flip``: accepts, moves nothing."""
        flip = await request.json()
        return JSONResponse({"ok": True, "flipped": flip,
                             "note": "opsgate demo stand-in: no traffic was moved"})


def _slack_error(failed: SlackError) -> JSONResponse:
    return JSONResponse({"ok": False, "error": failed.code}, status_code=400)


# -- what the bot calls ----------------------------------------------------------------------


def _slack_routes(app: FastAPI, sandbox: Sandbox) -> None:
    @app.api_route("/api/{method}", methods=["GET", "POST"])
    async def slack_method(method: str, request: Request) -> JSONResponse:
        try:
            args = web_api.parse_args(dict(request.query_params), await request.body(),
                                      request.headers.get("content-type", ""))
        except (SlackError, ValueError) as failed:
            code = failed.code if isinstance(failed, SlackError) else "invalid_form_data"
            return JSONResponse({"ok": False, "error": code})
        return JSONResponse(web_api.call(sandbox.workspace, method,
                                         request.headers.get("authorization"), args))

    @app.post("/response/{token}")
    async def response_url(token: str, request: Request) -> JSONResponse:
        try:
            body = json.loads(await request.body() or b"{}")
            web_api.respond(sandbox.workspace, token, body if isinstance(body, dict) else {})
        except ValueError:
            return JSONResponse({"ok": False, "error": "invalid_json"}, status_code=400)
        except SlackError as failed:
            status = 404 if failed.code == "expired_url" else 400
            return JSONResponse({"ok": False, "error": failed.code}, status_code=status)
        return JSONResponse({"ok": True})


# -- the page --------------------------------------------------------------------------------


def _page_routes(app: FastAPI, sandbox: Sandbox) -> None:
    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse((PAGE / "index.html").read_text(encoding="utf-8"))

    @app.get("/page/{name}")
    def asset(name: str) -> Response:
        kinds = {"app.js": "text/javascript", "style.css": "text/css"}
        if name not in kinds:
            return Response(status_code=404)
        return Response((PAGE / name).read_text(encoding="utf-8"), media_type=kinds[name])

    @app.get("/sandbox/state")
    def state(user: str) -> JSONResponse:
        return JSONResponse(_state(sandbox, user))

    @app.get("/sandbox/stream")
    async def stream() -> StreamingResponse:
        return StreamingResponse(_versions(sandbox), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})


def _state(sandbox: Sandbox, user: str) -> dict[str, Any]:
    workspace = sandbox.workspace
    version = workspace.version
    return {
        "version": version,
        "me": user,
        "channel": {"id": CHANNEL_ID, "name": CHANNEL_NAME},
        "bot": {"id": BOT.id, "name": BOT.name},
        "people": [{"id": p.id, "name": p.name, "real_name": p.real_name, "role": p.role}
                   for p in PEOPLE],
        "names": {p.id: p.name for p in workspace.people.values()},
        "messages": [{**m.as_slack(), "ephemeral": m.visible_to is not None}
                     for m in workspace.visible(user)],
        "views": [{"id": v.id, "view": v.view, "errors": v.errors}
                  for v in workspace.views_of(user)],
        "chaos": sandbox.sender.chaos,
        "deliveries": [d.as_json() for d in list(sandbox.sender.deliveries)[-15:]],
    }


async def _versions(sandbox: Sandbox) -> AsyncIterator[str]:
    """One ``data: <version>`` event whenever the workspace changes, and a comment now and then
    so proxies keep the stream open."""
    sent, quiet_s = -1, 0.0
    while not sandbox.stopping:
        version = sandbox.workspace.version
        if version != sent:
            sent, quiet_s = version, 0.0
            yield f"data: {version}\n\n"
        elif quiet_s >= STREAM_KEEPALIVE_S:
            quiet_s = 0.0
            yield ": keepalive\n\n"
        await asyncio.sleep(STREAM_EVERY_S)
        quiet_s += STREAM_EVERY_S


# -- what people do on the page --------------------------------------------------------------


def _action_routes(app: FastAPI, sandbox: Sandbox) -> None:
    _sending_routes(app, sandbox.sender)
    _view_routes(app, sandbox)


def _sending_routes(app: FastAPI, sender: SlackSender) -> None:
    """What a person sends the bot: a message or command, a click, a reaction, a modal."""

    @app.post("/sandbox/say", status_code=202)
    def say(said: Said) -> Response:
        """A message, a mention or (starting with ``/``) a slash command."""
        if said.text.startswith("/"):
            return _sent(lambda: sender.command(said.user, said.text, said.thread_ts))
        return _sent(lambda: sender.say(said.user, said.text, said.thread_ts))

    @app.post("/sandbox/click", status_code=202)
    def click(clicked: Clicked) -> Response:
        return _sent(lambda: sender.click(clicked.user, clicked.message_ts, clicked.action_id,
                                          clicked.block_id))

    @app.post("/sandbox/react", status_code=202)
    def react(reacted: Reacted) -> Response:
        return _sent(lambda: sender.react(reacted.user, reacted.message_ts, reacted.reaction,
                                          on=reacted.on))

    @app.post("/sandbox/submit", status_code=202)
    def submit(submitted: Submitted) -> Response:
        return _sent(lambda: sender.submit(submitted.user, submitted.view_id, submitted.values))


def _view_routes(app: FastAPI, sandbox: Sandbox) -> None:
    """What a person does to the page itself: close a modal, switch chaos on or off."""
    sender = sandbox.sender

    @app.post("/sandbox/dismiss", status_code=204)
    def dismiss(dismissed: Dismissed) -> Response:
        sender.dismiss(dismissed.user, dismissed.view_id)
        return Response(status_code=204)

    @app.post("/sandbox/chaos")
    def chaos(chaos: Chaos) -> JSONResponse:
        sender.chaos = chaos.on
        sandbox.workspace.touch()
        return JSONResponse({"chaos": sender.chaos})


def _sent(send: Callable[[], object]) -> Response:
    """202 once the sandbox has delivered it to the bot; Slack's refusal otherwise."""
    try:
        send()
    except SlackError as failed:
        return _slack_error(failed)
    return Response(status_code=202)


# -- the case panel --------------------------------------------------------------------------


def _case_routes(app: FastAPI, sandbox: Sandbox) -> None:
    @app.get("/sandbox/cases")
    async def cases() -> Response:
        return await _from_api(sandbox, "/case")

    @app.get("/sandbox/cases/{case_id}")
    async def case(case_id: str) -> Response:
        async with httpx.AsyncClient(base_url=sandbox.api_url, timeout=API_TIMEOUT_S) as client:
            try:
                found = await client.get(f"/case/{case_id}")
                timeline = await client.get(f"/case/{case_id}/timeline")
            except httpx.HTTPError as exc:
                return JSONResponse({"error": f"opsgate API unreachable: {exc}"}, 502)
        if found.status_code != 200:
            return Response(found.content, found.status_code, media_type="application/json")
        rows = [_in_words(row, sandbox.workspace.people) for row in timeline.json()["data"]]
        return JSONResponse({"case": found.json()["data"], "timeline": rows})


def _in_words(row: dict[str, Any], people: Mapping[str, Person]) -> dict[str, Any]:
    """A timeline row as the side panel shows it: its event in words and the people in its
    reason by name (the REST API keeps ids: names are the reader's)."""
    names = {person.id: person.name for person in people.values()}
    meta = row.get("meta") or {}
    said = {"event": event_said(row.get("event"), meta.get("outcome")),
            "actor": names.get(str(row.get("actor")), row.get("actor")),
            "reason": names_in(str(row["reason"]), lambda id_: names.get(id_, id_))
            if row.get("reason") else None}
    return {**row, "said": said}


async def _from_api(sandbox: Sandbox, path: str) -> Response:
    async with httpx.AsyncClient(base_url=sandbox.api_url, timeout=API_TIMEOUT_S) as client:
        try:
            reply = await client.get(path)
        except httpx.HTTPError as exc:
            return JSONResponse({"error": f"opsgate API unreachable: {exc}"}, 502)
    return Response(reply.content, reply.status_code, media_type="application/json")
