"""The Bolt app factory and the HTTP route: ``build_bolt(app)`` wires the listeners to one opsgate
``App`` (no module-level app); ``mount_slack_events`` serves it as ``POST /slack/events`` on the
opsgate API.

The route runs Bolt's synchronous dispatch in a worker thread: Bolt's own Starlette handler calls
it on the event loop, which would make every concurrent request wait for the one being acked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request, Response
from slack_bolt import App as Bolt
from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.adapter.starlette.handler import to_bolt_request, to_starlette_response
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier
from starlette.concurrency import run_in_threadpool

from bot.agent import Agent, configured_agent
from bot.cases import SlackCases
from bot.failures import report
from bot.listeners import actions, commands, events
from bot.settings import SlackSettings
from bot.slack_store import SlackStore
from core.bootstrap import App
from core.metrics import SLACK_ACK_SECONDS
from core.strict_json import MAX_DEPTH, non_finite_problems, too_deep

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
ACKS_FIRST_S = 2.0  # how long acked work may wait for a burst of acks to pass
QUIET_S = 0.02  # no request for this long: the burst has passed


def slack_configured(slack: SlackSettings) -> bool:
    return slack.slack_bot_token is not None


def web_client(slack: SlackSettings) -> WebClient:
    """The Web API client every Slack call goes through (``OPSGATE_SLACK_API_URL``)."""
    token = slack.slack_bot_token
    base_url = slack.slack_api_url if slack.slack_api_url.endswith("/") \
        else slack.slack_api_url + "/"
    return WebClient(token=None if token is None else token.get_secret_value(),
                     base_url=base_url, timeout=10)


def build_bolt(app: App, *, agent: Agent | None = None, client: WebClient | None = None,
               verify_requests: bool = True) -> Bolt:
    """A Bolt app serving ``app``: events, ``/case``, the plan buttons and the reject modal.
    ``verify_requests`` is off only in Socket Mode, where Slack's WebSocket is the proof."""
    slack = app.settings.layer(SlackSettings)
    require_slack_secrets(slack, verify_requests)
    client = client or web_client(slack)
    bolt = bare_bolt(slack, client, verify_requests)
    cases = SlackCases(app, client, SlackStore(app.engine),
                       agent if agent is not None else configured_agent(app))
    bolt.middleware(refuse_non_finite_numbers)
    bolt.middleware(refuse_deep_payloads)
    for listeners in (events, commands, actions):
        listeners.register(bolt, cases)

    @bolt.error
    def on_error(error: Exception, body: dict[str, object]) -> None:
        report(error, dict(body), cases)

    return bolt


def require_slack_secrets(slack: SlackSettings, verify_requests: bool) -> None:
    """Refuse to start without the bot token, or without the signing secret when Slack's
    HTTP requests are to be verified."""
    if slack.slack_bot_token is None:
        raise ValueError("SLACK_BOT_TOKEN is not set: the Slack bot cannot start")
    if verify_requests and slack.slack_signing_secret is None:
        raise ValueError("SLACK_SIGNING_SECRET is not set: Slack's HTTP requests cannot be "
                         "verified, so the bot refuses to serve them")


def bare_bolt(slack: SlackSettings, client: WebClient, verify_requests: bool) -> Bolt:
    """The Bolt app itself, before any listener: its signing secret, client and workers."""
    secret = slack.slack_signing_secret
    return Bolt(
        signing_secret=None if secret is None else secret.get_secret_value(),
        client=client,
        token_verification_enabled=False,  # auth.test on the first request, not at build time
        request_verification_enabled=verify_requests,
        listener_executor=ThreadPoolExecutor(max_workers=slack.slack_workers,
                                             thread_name_prefix="slack-work"),
        logger=logging.getLogger("bot.bolt"),
    )


def refuse_non_finite_numbers(body: dict[str, Any], next_: Callable[[], None]
                              ) -> BoltResponse | None:
    """Slack never sends NaN or Infinity, which Python's JSON reader accepts and every numeric
    check lets through: a payload holding one reaches no listener (HTTP and Socket Mode alike,
    after the signature check)."""
    problems = non_finite_problems(body, "payload")
    if problems:
        log.warning("refused a Slack payload: %s", problems[0])
        return BoltResponse(status=HTTPStatus.BAD_REQUEST, body="malformed request")
    next_()
    return None


def refuse_deep_payloads(body: dict[str, Any], next_: Callable[[], None]) -> BoltResponse | None:
    """Slack's payloads nest a dozen levels at most: one nested deeper than
    ``core.strict_json.MAX_DEPTH`` (an interactivity ``payload`` form field, a Socket Mode
    envelope) reaches no listener. (A JSON body that deep is refused before Bolt reads it.)"""
    if too_deep(body):
        log.warning("refused a Slack payload nested deeper than %d levels", MAX_DEPTH)
        return BoltResponse(status=HTTPStatus.BAD_REQUEST, body="malformed request")
    next_()
    return None


class SlackEvents:
    """``POST /slack/events`` over one Bolt app.

    An Events API callback whose signature checks out is acked at once (Slack needs only the
    200) and handed to Bolt on a small pool; commands, buttons and modals wait for Bolt's ack,
    whose body they need, on a worker thread (Bolt's own Starlette adapter would run the
    synchronous dispatch on the event loop and queue every concurrent ack behind it).

    Acks come first: acked events are handed to Bolt once no request arrived for a moment
    (bounded), because the work they start (Bolt's dispatch, opening the case) holds the
    interpreter's lock and would slow every ack in a burst of mentions."""

    def __init__(self, bolt: Bolt, signing_secret: str, *, handoff_workers: int = 2) -> None:
        self.bolt = bolt
        self.verifier = SignatureVerifier(signing_secret)
        self.handoff = ThreadPoolExecutor(max_workers=handoff_workers,
                                          thread_name_prefix="slack-dispatch")
        self.last_request = 0.0  # when the latest request arrived (perf_counter)
        # Acked events not yet handed to Bolt, and the timer that hands them over; both are
        # touched on the event loop only (close() takes what is left).
        self.pending: list[tuple[bytes, dict[str, str]]] = []
        self.pending_since = 0.0
        self.flush_timer: asyncio.TimerHandle | None = None

    async def __call__(self, request: Request) -> Response:
        started = self.last_request = time.perf_counter()
        body = await request.body()
        try:
            early = self._early_ack(body, request.headers)
            if early is not None:
                if early == HTTPStatus.OK:
                    self._hand_off(body, dict(request.headers))
                return Response(status_code=early)
            answer = await run_in_threadpool(self.bolt.dispatch, to_bolt_request(request, body))
        except Exception:  # a body Bolt cannot even parse: refused, nothing touched
            log.warning("refused a Slack request Bolt could not parse (%d bytes)", len(body))
            return Response(status_code=HTTPStatus.BAD_REQUEST, content="malformed request")
        finally:
            SLACK_ACK_SECONDS.observe(time.perf_counter() - started)
        if answer.status == HTTPStatus.UNAUTHORIZED:
            log.warning("refused a Slack request: bad signature or timestamp older than 5 min")
        return to_starlette_response(answer)

    def _early_ack(self, body: bytes, headers: Mapping[str, str]) -> int | None:
        """200 for a verified Events API callback, 401 for an unverified one; None for anything
        else (Bolt answers it)."""
        if not headers.get("content-type", "").startswith("application/json"):
            return None
        try:
            payload = json.loads(body)
        except ValueError:
            return None
        if not isinstance(payload, dict) or payload.get("type") != "event_callback" or \
                not isinstance(payload.get("event"), dict):
            return None
        try:
            verified = self.verifier.is_valid(body, headers.get("x-slack-request-timestamp"),
                                              headers.get("x-slack-signature"))
        except ValueError:  # a timestamp that is not a number
            verified = False
        if not verified:
            log.warning("refused a Slack request: bad signature or timestamp older than 5 min")
            return HTTPStatus.UNAUTHORIZED
        return HTTPStatus.OK

    def _hand_off(self, body: bytes, headers: dict[str, str]) -> None:
        """Keep an acked event for Bolt; a timer on the event loop hands the kept ones over once
        no request arrived for ``QUIET_S`` (or after ``ACKS_FIRST_S``). Nothing polls, so no
        thread takes the interpreter lock from the acks in the meantime."""
        if not self.pending:
            self.pending_since = time.perf_counter()
        self.pending.append((body, headers))
        if self.flush_timer is None:
            self.flush_timer = asyncio.get_running_loop().call_later(QUIET_S, self._flush)

    def _flush(self) -> None:
        self.flush_timer = None
        now = time.perf_counter()
        if now - self.last_request < QUIET_S and now - self.pending_since < ACKS_FIRST_S:
            self.flush_timer = asyncio.get_running_loop().call_later(QUIET_S, self._flush)
            return
        kept, self.pending = self.pending, []
        for body, headers in kept:
            self.handoff.submit(self._dispatch, body, headers)

    def _dispatch(self, body: bytes, headers: dict[str, str]) -> None:
        request = BoltRequest(body=body.decode("utf-8"), headers=dict(headers))
        answer = self.bolt.dispatch(request)  # verifies again, then runs the lazy listeners
        if answer.status >= HTTPStatus.BAD_REQUEST:
            log.warning("slack event dispatched after its ack answered %d: %s", answer.status,
                        answer.body[:200])

    def close(self) -> None:
        """Finish what was acked: hand-offs first, then the work they started."""
        if self.flush_timer is not None:
            self.flush_timer.cancel()
        kept, self.pending = self.pending, []
        for body, headers in kept:
            self.handoff.submit(self._dispatch, body, headers)
        self.handoff.shutdown(wait=True)
        self.bolt._listener_runner.listener_executor.shutdown(wait=True)


def mount_slack_events(app: App, api: FastAPI, events: SlackEvents | None = None) -> None:
    """Serve Slack's Events API, slash commands and interactivity at ``POST /slack/events``.
    Without a bot token Slack is off; without a signing secret (Socket Mode only) requests
    could not be verified: either way nothing is mounted."""
    if events is None:
        slack = app.settings.layer(SlackSettings)
        if not slack_configured(slack):
            log.info("Slack is off (SLACK_BOT_TOKEN is not set): %s not served", EVENTS_PATH)
            return
        if slack.slack_signing_secret is None:
            log.warning("SLACK_SIGNING_SECRET is not set: %s not served (Socket Mode only)",
                        EVENTS_PATH)
            return
        events = SlackEvents(build_bolt(app), slack.slack_signing_secret.get_secret_value())
    api.add_api_route(EVENTS_PATH, events, methods=["POST"], include_in_schema=False)
    api.router.on_shutdown.append(events.close)
