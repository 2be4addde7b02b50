"""``core.alerts.text``: what PostgreSQL refuses is replaced, and text over its budget is cut
at a word (or a character), never inside one, with a marker."""

from __future__ import annotations

import pytest

from core.alerts.text import REPLACEMENT, cut, shortened, storable


def test_nul_and_lone_surrogates_become_the_replacement_character():
    assert storable("a\x00b\ud800c\udfffd") == f"a{REPLACEMENT}b{REPLACEMENT}c{REPLACEMENT}d"
    assert storable("café 🔥") == "café 🔥"  # whole characters, surrogate pairs included


def test_text_within_its_budget_is_kept_as_it_is():
    assert cut("disk full", 9) == "disk full"
    assert shortened("disk full", 9) == "disk full"


def test_a_cut_ends_at_a_word_and_says_how_much_went():
    text = "the data volume of db-1 is nearly full " * 10
    kept = cut(text, 100)
    head, _, marker = kept.rpartition("… [")
    assert len(kept) <= 100
    assert text[len(head)] == " " and text.startswith(head)
    assert marker == f"{len(text) - len(head)} characters cut]"


def test_a_shortened_line_ends_at_a_word_with_an_ellipsis():
    assert shortened("the data volume of db-1 is nearly full", 30) == "the data volume of db-1 is…"


@pytest.mark.parametrize("text", ["🔥" * 500, "x" * 500, "é" * 499 + "\x00"])
def test_without_a_space_near_the_cut_is_between_characters(text):
    kept = cut(text, 100)
    assert len(kept) <= 100
    kept.encode("utf-8")
    assert kept.startswith(storable(text)[:60])
