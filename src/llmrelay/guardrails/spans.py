"""What a detector finds: spans of a text, as (start, end, kind) with `end` exclusive and
`kind` the detector that matched (`email`, `aws_access_key`, a custom rule's name...)."""

from __future__ import annotations

from collections.abc import Callable

Span = tuple[int, int, str]
#: A detector: every span of the text it recognises, in order, never overlapping itself.
Finder = Callable[[str], list[Span]]


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum (ISO/IEC 7812) of a string of ASCII digits."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0
