"""An empty fetch is an empty fetch, however nats-py words it: a deadline that ran out between
its two pull requests raises a bare ``asyncio.TimeoutError`` on a loaded machine, and the reader
must read that as "none came", not as a lost connection."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest

from core.messaging.jetstream.reader import fetch


class Subscription:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def fetch(self, batch: int, timeout: float) -> list[object]:
        raise self.error


@pytest.mark.parametrize("error", [nats.errors.TimeoutError(), TimeoutError()])
def test_a_fetch_that_ran_out_of_time_brought_nothing(error: BaseException) -> None:
    assert asyncio.run(fetch(Subscription(error), 10, 0.1)) == []  # type: ignore[arg-type]


def test_a_lost_connection_is_still_an_error() -> None:
    with pytest.raises(nats.errors.ConnectionClosedError):
        asyncio.run(fetch(Subscription(nats.errors.ConnectionClosedError()), 10, 0.1))  # type: ignore[arg-type]
