"""The bot's leases on the test's clock: a Slack event's claim and a renderer's hold on a case
card are taken over once their lease has passed, and not a moment before."""

from __future__ import annotations

import uuid

from sqlalchemy import Engine

from bot.card_store import CardStore
from bot.slack_store import SlackStore
from tests.support.clock import Clock


def test_an_event_claim_is_taken_over_only_after_its_lease(engine: Engine) -> None:
    clock = Clock()
    store = SlackStore(engine, event_lease_s=120, clock=clock)
    first = store.claim_event("EvLease", "T0001:C0INCIDENT:1.000100")
    assert first is not None
    clock.advance(119)
    assert store.claim_event("EvLease", "T0001:C0INCIDENT:1.000100") is None  # still running
    clock.advance(2)
    second = store.claim_event("EvLease", "T0001:C0INCIDENT:1.000100")
    assert second is not None and second != first  # the first attempt died: a retry takes it
    store.finish_event("EvLease", "T0001:C0INCIDENT:1.000100", second)
    clock.advance(1000)
    assert store.claim_event("EvLease", "T0001:C0INCIDENT:1.000100") is None  # done for good


def test_a_card_held_past_its_lease_goes_to_the_next_renderer(engine: Engine) -> None:
    clock = Clock()
    cards, case_id = CardStore(engine, clock=clock), uuid.uuid4()
    cards.place(case_id, "C0INCIDENT", "1.000200", "🔎 Case")
    assert cards.take(case_id, "first", lease_s=30) is True
    clock.advance(30)
    assert cards.take(case_id, "second", lease_s=30) is False  # held: asked to render again
    clock.advance(1)
    assert cards.take(case_id, "second", lease_s=30) is True  # the first renderer died
    assert cards.release(case_id, "first") is True  # it lost the card: nothing left to render
    card = cards.card(case_id)
    assert card is not None and card.owner == "second"
