"""The detectors a rule can name, and the finder each compiles to.

Built-in kinds: `email`, `phone`, `card`, `iban` (pii.py) and the credential formats of
secrets.py; `pii` and `secrets` name all of a family at once (each span still says which
kind matched). `regex` and `words` are the operator's own (custom.py); their spans carry the
rule's name as their kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from llmrelay.guardrails import custom, pii, secrets
from llmrelay.guardrails.spans import Finder, Span

PII_KINDS: Final = ("email", "phone", "card", "iban")
_BUILTIN: Final[dict[str, Finder]] = {
    "email": pii.find_emails,
    "phone": pii.find_phones,
    "card": pii.find_cards,
    "iban": pii.find_ibans,
    **{kind: secrets.format_finder(kind) for kind in secrets.SECRET_KINDS},
}
FAMILIES: Final[dict[str, tuple[str, ...]]] = {
    "pii": PII_KINDS,
    "secrets": tuple(secrets.SECRET_KINDS),
}
CUSTOM: Final = ("regex", "words")
#: Every name a rule's `detector` may take.
DETECTORS: Final = (*_BUILTIN, *FAMILIES, *CUSTOM)


def finder(
    detector: str,
    name: str,
    *,
    pattern: str | None = None,
    words: Sequence[str] | None = None,
    case_sensitive: bool = False,
) -> Finder:
    """The finder of one rule. Raises custom.PatternError for a pattern or word list that
    cannot be used, KeyError for an unknown detector."""
    if detector == "regex":
        if pattern is None:
            raise custom.PatternError("a regex rule needs a pattern")
        return custom.regex_finder(name, pattern, case_sensitive=case_sensitive)
    if detector == "words":
        return custom.words_finder(name, words or ())
    family = FAMILIES.get(detector)
    if family is None:
        return _BUILTIN[detector]
    return _all_of(tuple(_BUILTIN[kind] for kind in family))


def _all_of(finders: tuple[Finder, ...]) -> Finder:
    def find(text: str) -> list[Span]:
        found: list[Span] = []
        for find_one in finders:
            found += find_one(text)
        return found

    return find


def default_placeholder(kind: str) -> str:
    """`[EMAIL]`, `[AWS_ACCESS_KEY]`, `[TICKET]` (a custom rule named ticket)."""
    return f"[{kind.upper()}]"
