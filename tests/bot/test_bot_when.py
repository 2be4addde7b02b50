"""One time format in Slack: the date token each reader sees in their own zone, UTC as the
fallback; something that is not a time is a dash, never a raw string."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.when import slack_time


def test_a_moment_is_slacks_date_token_with_the_utc_clock_as_fallback() -> None:
    at = datetime(2026, 11, 23, 7, 1, 2, tzinfo=UTC)
    token = f"<!date^{int(at.timestamp())}^{{time_secs}}|07:01:02 UTC>"
    assert slack_time(at.isoformat()) == token
    assert slack_time("2026-11-23 07:01:02") == token  # the database's naive UTC
    assert slack_time(at) == token
    assert slack_time(None) == slack_time("soon") == "—"
