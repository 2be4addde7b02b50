"""Requests Slack did not sign (or signed too long ago) and bodies that make no sense are refused
and logged; nothing changes: no case, no claimed event, no Web API call."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine, func, select

from bot.app import refuse_non_finite_numbers
from bot.ids import Action
from bot.tables import slack_event
from core.db.tables import ops_case
from tests.support.slack import (
    FORM,
    SECRET,
    action_body,
    mention_event,
    running_bot,
    signed,
)

BODY = mention_event("<@U0BOT> drop the database", event_id="EvBad", ts="30.000100")
NAN_CLICK = action_body(Action.APPROVE, "ap_x", user="U0BOB", message_ts="1.0").replace(
    "%22action_ts%22%3A+%22", "%22risk%22%3A+NaN%2C+%22action_ts%22%3A+%22")
BAD_HEADERS: dict[str, Callable[[str], dict[str, str]]] = {
    "bad signature": lambda body: signed(body, secret="not-the-secret"),
    "older than 5 min": lambda body: signed(body, timestamp=int(time.time()) - 301),
    "unsigned": lambda body: {"Content-Type": "application/json"},
    "forged": lambda body: {**signed(body), "X-Slack-Signature": "v0=" + "0" * 64},
}
MALFORMED = {
    "broken json": ("{not json", "application/json"),
    "broken payload": ("payload=%7Bnot-json", "application/x-www-form-urlencoded"),
    "no event": ('{"type": "event_callback", "event_id": "EvX"}', "application/json"),
    "NaN in an event": (BODY.replace('"event_time": ', '"event_time": NaN, "t": '),
                        "application/json"),
    "Infinity in a button's payload": (NAN_CLICK.replace("NaN", "Infinity"), FORM),
}


def untouched(engine: Engine) -> bool:
    with engine.connect() as conn:
        cases = conn.execute(select(func.count()).select_from(ops_case)).scalar_one()
        events = conn.execute(select(func.count()).select_from(slack_event)).scalar_one()
    return cases == 0 and events == 0


def test_unsigned_stale_or_malformed_requests_are_refused_and_logged(
        sqlite_engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO), running_bot(sqlite_engine, loop=False) as bot:
        for name, headers in BAD_HEADERS.items():
            caplog.clear()
            answer = bot.http.post(f"{bot.base}/slack/events", content=BODY.encode(),
                                   headers=headers(BODY))
            assert answer.status_code == 401, name
            assert "refused a Slack request" in caplog.text, name
        for name, (body, content_type) in MALFORMED.items():
            answer = bot.http.post(f"{bot.base}/slack/events", content=body.encode(),
                                   headers=signed(body, content_type=content_type,
                                                  secret=SECRET))
            assert 400 <= answer.status_code < 500, name
        time.sleep(0.3)
        assert untouched(sqlite_engine)
        assert [s.path for s in bot.slack.server.seen if s.path != "/api/auth.test"] == []


def test_a_signed_request_within_five_minutes_is_accepted(sqlite_engine: Engine) -> None:
    body = mention_event("<@U0BOT> api down", event_id="EvOk", ts="31.000100")
    acks_before = acks_observed()
    with running_bot(sqlite_engine, loop=False) as bot:
        answer = bot.http.post(f"{bot.base}/slack/events", content=body.encode(),
                               headers=signed(body, timestamp=int(time.time()) - 240))
        assert answer.status_code == 200
        bot.slack.wait_for(lambda: bool(bot.slack.posts()), what="the reply")
    assert acks_observed() == acks_before + 1  # slack_ack_seconds


def acks_observed() -> float:
    return REGISTRY.get_sample_value("slack_ack_seconds_count") or 0.0


def test_a_payload_with_nan_or_infinity_reaches_no_listener() -> None:
    """Bolt's middleware: HTTP and Socket Mode payloads alike, after the signature check."""
    called: list[bool] = []
    for number in (float("nan"), float("inf"), float("-inf")):
        answer = refuse_non_finite_numbers({"actions": [{"value": "ap_1", "x": number}]},
                                           lambda: called.append(True))
        assert answer is not None and answer.status == 400
    assert called == []
    assert refuse_non_finite_numbers({"actions": [{"x": 1.5}]}, lambda: called.append(True)) \
        is None
    assert called == [True]
