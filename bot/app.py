"""The Bolt app factory and the HTTP route: ``build_bolt(app)`` wires the listeners to one opsgate
``App`` (no module-level app); ``mount_slack_events`` serves it as ``POST /slack/events`` on the
opsgate API.

The route runs Bolt's synchronous dispatch in a worker thread: Bolt's own Starlette handler calls
it on the event loop, which would make every concurrent request wait for the one being acked.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request, Response
from slack_bolt import App as Bolt
from slack_bolt.adapter.starlette.handler import to_bolt_request, to_starlette_response
from slack_sdk import WebClient
from starlette.concurrency import run_in_threadpool

from bot.agent import Agent, configured_agent
from bot.cases import SlackCases
from bot.failures import report
from bot.listeners import actions, commands, events
from bot.store import SlackStore
from core.bootstrap import App
from core.metrics import SLACK_ACK_SECONDS
from core.settings import Settings

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"


def slack_configured(settings: Settings) -> bool:
    return settings.slack_bot_token is not None


def web_client(settings: Settings) -> WebClient:
    """The Web API client every Slack call goes through (``OPSGATE_SLACK_API_URL``)."""
    token = settings.slack_bot_token
    base_url = settings.slack_api_url if settings.slack_api_url.endswith("/") \
        else settings.slack_api_url + "/"
    return WebClient(token=None if token is None else token.get_secret_value(),
                     base_url=base_url, timeout=10)


def build_bolt(app: App, *, agent: Agent | None = None, client: WebClient | None = None,
               verify_requests: bool = True) -> Bolt:
    """A Bolt app serving ``app``: events, ``/case``, the plan buttons and the reject modal.
    ``verify_requests`` is off only in Socket Mode, where Slack's WebSocket is the proof."""
    settings = app.settings
    if settings.slack_bot_token is None:
        raise ValueError("SLACK_BOT_TOKEN is not set: the Slack bot cannot start")
    secret = settings.slack_signing_secret
    if verify_requests and secret is None:
        raise ValueError("SLACK_SIGNING_SECRET is not set: Slack's HTTP requests cannot be "
                         "verified, so the bot refuses to serve them")
    client = client or web_client(settings)
    bolt = Bolt(
        signing_secret=None if secret is None else secret.get_secret_value(),
        client=client,
        token_verification_enabled=False,  # auth.test on the first request, not at build time
        request_verification_enabled=verify_requests,
        listener_executor=ThreadPoolExecutor(max_workers=settings.slack_workers,
                                             thread_name_prefix="slack-work"),
        logger=logging.getLogger("bot.bolt"),
    )
    cases = SlackCases(app, client, SlackStore(app.engine),
                       agent if agent is not None else configured_agent(app))
    for listeners in (events, commands, actions):
        listeners.register(bolt, cases)

    @bolt.error
    def on_error(error: Exception, body: dict[str, object]) -> None:
        report(error, dict(body), client)

    return bolt


def mount_slack_events(app: App, api: FastAPI, bolt: Bolt | None = None) -> None:
    """Serve Slack's Events API, slash commands and interactivity at ``POST /slack/events``.
    Without a bot token Slack is off; without a signing secret (Socket Mode only) requests
    could not be verified: either way nothing is mounted."""
    if bolt is None:
        if not slack_configured(app.settings):
            log.info("Slack is off (SLACK_BOT_TOKEN is not set): %s not served", EVENTS_PATH)
            return
        if app.settings.slack_signing_secret is None:
            log.warning("SLACK_SIGNING_SECRET is not set: %s not served (Socket Mode only)",
                        EVENTS_PATH)
            return
        bolt = build_bolt(app)
    served = bolt

    @api.post(EVENTS_PATH, include_in_schema=False)
    async def slack_events(request: Request) -> Response:
        started = time.perf_counter()
        body = await request.body()
        try:
            answer = await run_in_threadpool(served.dispatch, to_bolt_request(request, body))
        except Exception:  # a body Bolt cannot even parse: refused, nothing touched
            log.warning("refused a Slack request Bolt could not parse (%d bytes)", len(body))
            return Response(status_code=400, content="malformed request")
        finally:
            SLACK_ACK_SECONDS.observe(time.perf_counter() - started)
        if answer.status == 401:
            log.warning("refused a Slack request: bad signature or timestamp older than 5 min")
        return to_starlette_response(answer)
