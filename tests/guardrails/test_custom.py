"""Operators' detectors: RE2 patterns (refused when unusable, linear whatever they say) and
word lists (whole words, any case, Unicode)."""

from __future__ import annotations

import time

import pytest

from llmrelay.guardrails import custom
from llmrelay.guardrails.spans import Finder


def _found(find: Finder, text: str) -> list[str]:
    return [text[a:b] for a, b, _ in find(text)]


def test_regex_finds_each_match_with_the_rule_name_as_kind() -> None:
    find = custom.regex_finder("ticket", r"TICKET-\d{4,6}")
    assert find("see TICKET-1234 and TICKET-99999.") == [
        (4, 15, "ticket"),
        (20, 32, "ticket"),
    ]


def test_regex_case_sensitivity_is_the_rule_choice() -> None:
    assert _found(custom.regex_finder("p", "project x"), "Project X") == []
    found = _found(custom.regex_finder("p", "project x", case_sensitive=False), "Project X")
    assert found == ["Project X"]


def test_regex_offsets_are_characters_not_bytes() -> None:
    text = "café ☕ TICKET-12345"
    (span,) = custom.regex_finder("t", r"TICKET-\d+")(text)
    assert text[span[0] : span[1]] == "TICKET-12345"


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "backreferences"),
        (r"(?<=x)y", "lookaround"),
        (r"(unclosed", "missing )"),
        (r"a*", "empty text"),
        ("", "may not be empty"),
        ("a" * 2001, "at most 2000"),
    ],
)
def test_unusable_patterns_are_refused_with_the_reason(pattern: str, reason: str) -> None:
    with pytest.raises(custom.PatternError, match=reason.replace(")", r"\)")):
        custom.compile_pattern(pattern)


def test_a_catastrophic_pattern_runs_in_linear_time() -> None:
    """`(a+)+$` takes a backtracking engine exponential time on "aaa...b"; RE2 does not."""
    find = custom.regex_finder("x", r"(a+)+$")
    started = time.perf_counter()
    assert find("a" * 50_000 + "b") == []
    assert time.perf_counter() - started < 2.0  # exponential would be astronomically longer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Acme and ACME and acme.", ["Acme", "ACME", "acme"]),
        ("acmeville and megaacme", []),  # inside other words
        ("un CAFÉ noir", ["CAFÉ"]),  # Unicode case and word characters
        ("cafés", []),
        ("credit card please", ["credit card"]),  # the longest word first
        ("I write C++ daily", ["C++"]),  # a word ending in punctuation
        ("naïveté matters", ["naïveté"]),
    ],
)
def test_words_match_whole_words_any_case(text: str, expected: list[str]) -> None:
    find = custom.words_finder("w", ["acme", "café", "credit", "credit card", "c++", "Naïveté"])
    assert _found(find, text) == expected


def test_word_characters_around_do_not_make_a_match() -> None:
    find = custom.words_finder("w", ["secret"])
    assert _found(find, "topsecret secret_sauce secret2 (secret)") == ["secret"]


@pytest.mark.parametrize(
    ("words", "reason"),
    [([], "at least one"), ([" "], "may not be empty"), (["x" * 101], "at most 100")],
)
def test_unusable_word_lists_are_refused(words: list[str], reason: str) -> None:
    with pytest.raises(custom.PatternError, match=reason):
        custom.check_words(words)


def test_duplicate_words_are_kept_once() -> None:
    assert custom.check_words(["Acme", "acme ", "ACME", "globex"]) == ["Acme", "globex"]
