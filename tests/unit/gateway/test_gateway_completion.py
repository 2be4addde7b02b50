"""The ledger's rule for a completion (``completion_of``): a call's outcome is recorded only
while its owner's lease holds; after that it is unknown, never a fact. And the target a person
checks, in words (``step_target``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.domain.targets import TARGET_LIMIT, step_target
from core.gateway.ledger import Completion, LedgerState, completion_of

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LEASE_LEFT, LEASE_GONE = NOW + timedelta(seconds=1), NOW - timedelta(seconds=1)


@pytest.mark.parametrize(("state", "holder", "lease_until", "expected"), [
    # the owner still holds its lease: the outcome is the record
    (LedgerState.IN_PROGRESS, "me", LEASE_LEFT, Completion.RECORDED),
    # a retry after the reply to our own completion was lost: still recorded
    (LedgerState.DONE, "me", None, Completion.RECORDED),
    (LedgerState.REFUSED, "me", None, Completion.RECORDED),
    # the lease ended (at this very moment, or before) and nobody took over: unknown
    (LedgerState.IN_PROGRESS, "me", NOW, Completion.UNKNOWN),
    (LedgerState.IN_PROGRESS, "me", LEASE_GONE, Completion.UNKNOWN),
    # the expired claim was released (reconcile --repair, or by hand): unknown
    (LedgerState.RELEASED, "me", None, Completion.UNKNOWN),
    # a retry after the reply to our unknown completion was lost: still unknown
    (LedgerState.UNKNOWN_OUTCOME, "me", None, Completion.UNKNOWN),
    # someone else holds the key, running or finished, or the row is gone: taken over
    (LedgerState.IN_PROGRESS, "new-owner", LEASE_LEFT, Completion.TAKEN_OVER),
    (LedgerState.DONE, "new-owner", None, Completion.TAKEN_OVER),
    (None, None, None, Completion.TAKEN_OVER),
])
def test_a_completion_is_recorded_only_while_the_owners_lease_holds(
        state: LedgerState | None, holder: str | None, lease_until: datetime | None,
        expected: Completion) -> None:
    assert completion_of(state, holder, lease_until, "me", NOW) is expected


@pytest.mark.parametrize(("action", "params", "words"), [
    ("k8s.rollout", {"operation": "restart", "deployment": "checkout", "namespace": "shop"},
     "deployment checkout in namespace shop"),
    ("step.script.exec", {"argv": ["/opt/bin/drain", "--node", "web 1"]},
     "what the command /opt/bin/drain --node 'web 1' changes"),
    ("http.request", {"method": "POST", "url": "https://ops:secret@lb.example:8443/flip?x=1"},
     "the service behind POST https://lb.example:8443/flip?x=1"),
    ("gateway.flip", {"route": "checkout", "to": "blue"}, "route checkout (flipped to blue)"),
    ("mcp.call", {"server": "tickets", "tool": "close"},
     "what tool close of MCP server tickets changes"),
    ("noop", {}, "nothing (a noop step changes nothing)"),
    ("dns.update", {}, "what the dns.update step changes"),
])
def test_a_steps_target_in_words_never_shows_credentials(action: str, params: dict[str, object],
                                                           words: str) -> None:
    assert step_target(action, params) == words


def test_a_long_target_is_cut_between_words() -> None:
    words = step_target("script.exec", {"argv": ["/bin/tool", *["argument"] * 40]})
    assert len(words) <= TARGET_LIMIT and words.endswith("argument…")
