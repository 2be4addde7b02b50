"""The sandbox's side panel reads a case's timeline from the REST API, which keeps ids and
event names; the panel shows each row's event in words and its people by name."""

from __future__ import annotations

from bot.sandbox.server import _in_words
from bot.sandbox.workspace import PEOPLE, Workspace


def test_a_timeline_row_reads_in_words_with_people_by_name() -> None:
    people = Workspace("xoxb-test").people
    alice, bob = PEOPLE[0], PEOPLE[1]
    row = {"event": "gate_rejected", "actor": alice.id, "meta": {"outcome": "accepted"},
           "reason": f"{bob.id} is not an approver ({alice.id} may approve)"}
    said = _in_words(row, people)["said"]
    assert said == {"event": "rejected", "actor": alice.name,
                    "reason": f"{bob.name} is not an approver ({alice.name} may approve)"}
    refused = _in_words({"event": "plan_approval", "actor": bob.id,
                         "meta": {"outcome": "refused"}, "reason": None}, people)["said"]
    assert refused["event"] == "approval refused" and refused["reason"] is None
    assert _in_words(row, people)["event"] == "gate_rejected"  # the REST row itself kept
