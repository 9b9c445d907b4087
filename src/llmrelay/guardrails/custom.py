"""Operators' own detectors: regular expressions and word lists.

A pattern an operator writes is compiled with RE2 (google-re2), whose matching time is
linear in the text's length whatever the pattern: a pattern such as `(a+)+$`, which makes a
backtracking engine (Python's `re`) take exponential time on a crafted input, costs the same
as any other. The price is RE2's syntax: no backreferences and no lookaround, refused with
a message naming them when the policy is saved.

A word list matches whole words, case-insensitively, with Unicode's idea of a word
character (so `café` in "un café noir" matches and `cat` in "category" does not). Words
are kept in NFC, the form nearly all text arrives in (text in decomposed form, an accent as
a separate combining character, does not match an accented word). Its words are escaped,
never read as patterns, and the engine is Python's `re`, safe here because the pattern is a
plain alternation built by us.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Final

from llmrelay.guardrails.spans import Finder, Span

MAX_PATTERN_LENGTH: Final = 2000
MAX_WORDS: Final = 2000
MAX_WORD_LENGTH: Final = 100


class PatternError(ValueError):
    """A pattern or word list that cannot be used; the message says why."""


def _options(case_sensitive: bool) -> Any:
    import re2  # here: RE2 is 1.5 MiB of resident memory, needed only by a policy with patterns

    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    options.case_sensitive = case_sensitive
    options.max_mem = 8 << 20  # bounds the compiled automaton (a huge repetition is refused)
    return options


def compile_pattern(pattern: str, *, case_sensitive: bool = True) -> Any:
    """The RE2 program of `pattern`; PatternError with RE2's reason when it is not one."""
    if not pattern:
        raise PatternError("a pattern may not be empty")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(f"at most {MAX_PATTERN_LENGTH} characters")
    import re2  # (see _options)

    try:
        compiled = re2.compile(pattern, _options(case_sensitive))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise PatternError(
            f"not a valid pattern (RE2 syntax: no backreferences or lookaround): {reason}"
        ) from None
    if compiled.fullmatch("") is not None:
        raise PatternError("the pattern matches the empty text; it must match something")
    return compiled


def regex_finder(name: str, pattern: str, *, case_sensitive: bool = True) -> Finder:
    """Each non-empty match of `pattern`; its kind is the rule's name."""
    compiled = compile_pattern(pattern, case_sensitive=case_sensitive)

    def find(text: str) -> list[Span]:
        return [(m.start(), m.end(), name) for m in compiled.finditer(text) if m.end() > m.start()]

    return find


def check_words(words: Sequence[str]) -> list[str]:
    """The words as they will be matched (NFC, trimmed, one each); PatternError for a list
    that is empty, too long, or holds an empty or overlong word."""
    if not words:
        raise PatternError("at least one word")
    if len(words) > MAX_WORDS:
        raise PatternError(f"at most {MAX_WORDS} words")
    cleaned: list[str] = []
    for word in words:
        value = unicodedata.normalize("NFC", word.strip())
        if not value:
            raise PatternError("a word may not be empty")
        if len(value) > MAX_WORD_LENGTH:
            raise PatternError(f"a word is at most {MAX_WORD_LENGTH} characters: {value[:20]!r}...")
        if value.casefold() not in {c.casefold() for c in cleaned}:
            cleaned.append(value)
    return cleaned


def words_finder(name: str, words: Sequence[str]) -> Finder:
    """Whole-word, case-insensitive matches of any of `words` (the longest first, so
    "credit card" wins over "credit")."""
    cleaned = sorted(check_words(words), key=len, reverse=True)
    alternation = "|".join(re.escape(w) for w in cleaned)
    pattern = re.compile(rf"(?<!\w)(?:{alternation})(?!\w)", re.IGNORECASE)

    def find(text: str) -> list[Span]:
        return [(m.start(), m.end(), name) for m in pattern.finditer(text)]

    return find
