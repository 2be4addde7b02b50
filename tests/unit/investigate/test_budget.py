"""A read tool's answer within its token budget: lists lose their end, texts their start (the
newest log lines stay), a huge item is cut inside rather than dropped, every cut is named, and
one planning turn's answers add up against their share of the model's context."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.investigate.budget import Fitted, TurnBudget, fit, tokens_of

# -- a guard: fit must end (a loop that never ends hangs the agent's planning turn) --------------

FIT_SECONDS = 1.0


@contextmanager
def ends_within(seconds: float = FIT_SECONDS) -> Iterator[None]:
    """Fails the test (instead of hanging the run) when the block takes longer than ``seconds``."""
    def late(signum: int, frame: Any) -> None:
        raise AssertionError(f"fit did not end within {seconds} s: it loops forever")

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def fitted(body: dict[str, Any], budget: int) -> Fitted:
    with ends_within():
        return fit(body, budget)


def cuttable_left(value: Any) -> bool:
    """Whether ``value`` still holds a non-empty list or text (something ``fit`` could cut)."""
    if isinstance(value, dict):
        return any(cuttable_left(item) for item in value.values())
    return isinstance(value, list | str) and len(value) > 0


# -- an answer within its budget ---------------------------------------------------------------


def test_an_answer_within_its_budget_is_unchanged_and_names_no_cut() -> None:
    body = {"component": "payments-api", "pods": [{"name": "payments-api-7d9f", "ready": True}]}

    result = fitted(body, 1000)

    assert result.body == body
    assert result.cut == ()
    assert "cut" not in result.body


def test_tokens_are_the_json_text_in_fours() -> None:
    assert tokens_of({}) == 1  # "{}"
    assert tokens_of({"a": "bcd"}) == 3  # '{"a": "bcd"}': 12 characters
    assert tokens_of("x" * 398) == 100  # 400 characters with the quotes


# -- lists lose their end, texts their start -----------------------------------------------------


def test_a_long_list_loses_items_from_its_end_and_the_cut_names_the_path_and_counts() -> None:
    events = [{"reason": "BackOff", "n": n} for n in range(200)]

    result = fitted({"component": "payments-api", "events": events}, 300)

    kept = result.body["events"]
    assert 0 < len(kept) < 200
    assert kept == events[:len(kept)]  # the first ones, in order: the end was cut
    assert result.cut == (f"events: {200 - len(kept)} of 200 items cut to stay within 300 "
                          "tokens",)
    assert result.body["cut"] == list(result.cut)
    assert result.body["component"] == "payments-api"
    assert tokens_of(result.body) <= 300


def test_a_long_text_keeps_its_end_the_newest_log_lines() -> None:
    log = "\n".join(f"2026-11-27T14:{n // 60:02d}:{n % 60:02d}Z line {n}" for n in range(2000))

    result = fitted({"pod": "payments-api-7d9f", "log": log}, 200)

    kept = result.body["log"]
    assert kept.startswith("…")
    assert log.endswith(kept[1:])  # the end, unchanged
    assert kept.endswith("line 1999")
    assert "line 0\n" not in kept
    assert result.cut == (f"log: {len(log) - len(kept)} of {len(log)} characters cut to stay "
                          "within 200 tokens",)
    assert tokens_of(result.body) <= 200


def test_a_single_huge_item_inside_a_list_is_cut_inside_not_dropped() -> None:
    pods = [{"name": "payments-api-7d9f", "message": "x" * 20_000}]

    result = fitted({"pods": pods}, 500)

    assert len(result.body["pods"]) == 1
    pod = result.body["pods"][0]
    assert pod["name"] == "payments-api-7d9f"
    assert pod["message"].startswith("…") and 0 < len(pod["message"]) < 20_000
    assert [cut.split(":")[0] for cut in result.cut] == ["pods.0.message"]
    assert tokens_of(result.body) <= 500


def test_each_path_is_named_once_however_often_it_was_cut() -> None:
    result = fitted({"a": ["x" * 30] * 400, "b": "y" * 40_000}, 400)

    assert sorted(cut.split(":")[0] for cut in result.cut) == ["a", "b"]
    assert "of 400 items" in next(cut for cut in result.cut if cut.startswith("a:"))
    assert "of 40000 characters" in next(cut for cut in result.cut if cut.startswith("b:"))


def test_a_path_whose_name_says_of_is_counted_from_its_first_length() -> None:
    # label values and alert names become keys: "rate of errors" is one a metrics answer has
    result = fitted({"series": {"rate of errors": list(range(2000))}}, 100)

    kept = result.body["series"]["rate of errors"]
    assert result.cut == (f"series.rate of errors: {2000 - len(kept)} of 2000 items cut to stay "
                          "within 100 tokens",)


def test_the_notes_of_many_cuts_stay_few_and_count_every_part() -> None:
    # the notes are never cut: one per part would put 20 parts' notes (~300 tokens) over a
    # budget of 100 however much of the answer itself was cut
    body = {f"part{n}": "x" * 400 for n in range(20)}

    result = fitted(body, 100)

    assert len(result.cut) <= 4
    named = [cut for cut in result.cut if cut.startswith("part")]
    counted = sum(int(cut.split()[1]) for cut in result.cut if cut.startswith("and "))
    assert len(named) + counted == 20
    assert tokens_of(result.body["cut"]) < 100  # the notes alone fit the budget


def test_the_callers_answer_is_not_changed() -> None:
    body = {"events": list(range(1000))}

    fitted(body, 100)

    assert body == {"events": list(range(1000))}


# -- it ends, and what it answers fits ----------------------------------------------------------


def test_fit_ends_when_the_turn_has_almost_no_tokens_left() -> None:
    # looking.py asks for min(the tool's budget, what the turn has left): a handful at the end
    # of a turn. The keys alone are over it; every text must still be cut away, and fit end.
    body = {"component": "payments-api", "namespace": "prod", "pods": [{"name": "p1"}]}

    result = fitted(body, 10)

    assert not cuttable_left({k: v for k, v in result.body.items() if k != "cut"})


def test_fit_ends_when_keys_alone_are_over_the_budget() -> None:
    result = fitted({"k" * 1000: "abcdefgh"}, 10)

    assert result.body["k" * 1000] == ""


KEY = st.text(min_size=1, max_size=8).filter(lambda key: key != "cut")
LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                 st.text(max_size=300))
NESTED = st.recursive(LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=20), st.dictionaries(KEY, inner, max_size=4)), max_leaves=60)
ANSWERS = st.dictionaries(KEY, NESTED, max_size=4)


@settings(max_examples=200)
@given(ANSWERS, st.integers(100, 2000))
@example({"k" * 500: "abcdefgh"}, 100)  # keys over the budget, a short text left to cut
@example({"a of b": ["x" * 40] * 100, "c": "y" * 4000}, 100)  # a path that says " of "
def test_fit_always_ends_and_answers_within_budget_unless_nothing_is_left_to_cut(
        body: dict[str, Any], budget: int) -> None:
    """What ``fit`` cannot cut is the answer's skeleton (keys, numbers, empty lists) and its own
    notes of what it cut: past the budget only when every list and text is already empty."""
    result = fitted(body, budget)

    content = {key: value for key, value in result.body.items() if key != "cut"}
    assert tokens_of(result.body) <= budget or not cuttable_left(content)
    assert result.body.get("cut", []) == list(result.cut)


RECORD = st.fixed_dictionaries({"name": st.text(max_size=40), "reason": st.text(max_size=40),
                                "count": st.integers(0, 10_000), "message": st.text(max_size=2000)})
LOOK_ANSWERS = st.fixed_dictionaries({
    "component": st.sampled_from(["payments-api", "search-api", "checkout"]),
    "events": st.lists(RECORD, max_size=60),
    "log": st.text(max_size=20_000),
})
NOTES_AT_MOST = 3 * 40  # three cut notes (events, one of its items, log) of ~150 characters


@settings(max_examples=200)
@given(LOOK_ANSWERS, st.integers(100, 2000))
def test_an_answer_shaped_like_a_look_fits_its_budget(body: dict[str, Any], budget: int) -> None:
    """A look's answer (a few fields, a list of records, a text) always fits: its skeleton is
    small, so the only slack is the notes of what was cut."""
    result = fitted(body, budget)

    assert tokens_of(result.body) <= budget + NOTES_AT_MOST
    assert tokens_of({k: v for k, v in result.body.items() if k != "cut"}) <= budget


# -- one planning turn ---------------------------------------------------------------------------


def test_a_turn_adds_up_what_its_looks_said_and_collects_their_cuts() -> None:
    turn = TurnBudget(limit_tokens=1000)
    small = fitted({"alerts": []}, 1000)
    cut = fitted({"log": "line\n" * 5000}, 300)

    turn.spend(small, "list_alerts")
    turn.spend(cut, "pod_logs")

    assert turn.used_tokens == tokens_of(small.body) + tokens_of(cut.body)
    assert turn.left == 1000 - turn.used_tokens
    assert turn.cuts == [f"pod_logs: {cut.cut[0]}"]
    assert turn.cuts[0].startswith("pod_logs: log: ")


def test_a_turn_past_its_share_has_nothing_left_never_less() -> None:
    turn = TurnBudget(limit_tokens=10)

    turn.spend(Fitted({"log": "x" * 400}), "pod_logs")

    assert turn.used_tokens > 10
    assert turn.left == 0
    assert turn.cuts == []
