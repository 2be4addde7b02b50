"""One time format for every moment opsgate shows in Slack: Slack's date token
(``<!date^…^{time_secs}|07:01:02 UTC>``), which each reader sees in their own time zone, with
the UTC clock as the fallback where a client cannot draw it. Inside code a token is not drawn:
a time is never put in backticks."""

from __future__ import annotations

from contextlib import suppress
from datetime import UTC, datetime

NO_TIME = "—"


def slack_time(moment: object) -> str:
    """``moment`` (ISO 8601, or a datetime) as Slack's date token in the reader's local time;
    something that is not a time as ``—`` (or its text, escaped by the caller's rules: digits,
    dashes and colons only)."""
    at: datetime | None = moment if isinstance(moment, datetime) else None
    if at is None:
        with suppress(ValueError):
            at = datetime.fromisoformat(str(moment or ""))
    if at is None:
        return NO_TIME
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)  # the database's times are UTC
    fallback = f"{at.astimezone(UTC):%H:%M:%S} UTC"
    return f"<!date^{int(at.timestamp())}^{{time_secs}}|{fallback}>"
