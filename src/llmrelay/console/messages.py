"""The admin API's validation messages in plain words for a form.

The admin API answers a bad field with its path and the schema's message
(`limits.rpm: Input should be a valid integer, unable to parse string as an integer`), which
suits a script. Next to an input in a form the path is noise (the input is right there) and
the schema's words are jargon: this module says the same thing the way a person would
("must be a whole number"). A message it does not know is shown as it came, less the path."""

from __future__ import annotations

import re
from collections.abc import Callable

_Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]


def _fixed(text: str) -> Callable[[re.Match[str]], str]:
    return lambda _match: text


_RULES: tuple[_Rule, ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), say)
    for pattern, say in (
        (r"^Field required$", _fixed("is required")),
        (r"^Input should be a valid integer.*", _fixed("must be a whole number, like 60")),
        (
            r"^Input should be a valid (number|decimal).*",
            _fixed("must be a number, like 2.5"),
        ),
        (r"^Input should be a valid boolean.*", _fixed("must be on or off")),
        (
            r"^Input should be a valid datetime.*",
            _fixed("must be a date and time, like 2030-01-31 12:00"),
        ),
        (
            r"^Input should be greater than or equal to (\S+)$",
            lambda m: f"must be {m[1]} or more",
        ),
        (r"^Input should be greater than (\S+)$", lambda m: f"must be more than {m[1]}"),
        (r"^Input should be less than or equal to (\S+)$", lambda m: f"must be {m[1]} or less"),
        (r"^Input should be less than (\S+)$", lambda m: f"must be less than {m[1]}"),
        (
            r"^String should have at least (\d+) characters?$",
            lambda m: f"must be at least {m[1]} characters long",
        ),
        (
            r"^String should have at most (\d+) characters?$",
            lambda m: f"must be at most {m[1]} characters long",
        ),
        (
            r"^String should match pattern .*",
            _fixed("has characters that are not allowed here: use letters, digits and dashes"),
        ),
        (r"^Input should be (.+)$", lambda m: "must be " + m[1].replace("'", "")),
        (r"^Extra inputs are not permitted$", _fixed("is not a field this form may set")),
        (r"^List should have at least (\d+) items?.*", lambda m: f"needs at least {m[1]}"),
        (
            r"^value is not a valid email address.*",
            _fixed("is not an email address (like name@example.com)"),
        ),
        (r"^Value error, (.+)$", lambda m: m[1]),
        (r"^Assertion failed, (.+)$", lambda m: m[1]),
    )
)


def plain(message: str, field: str | None = None) -> str:
    """`message` as a form shows it next to its input: without the field's path (and any
    `field: ` prefix) and in plain words when it is one of the schema's phrases."""
    text = message.strip()
    if field and text.startswith(f"{field}: "):
        text = text[len(field) + 2 :]
    elif ": " in text and re.fullmatch(r"[\w.\[\]]+", text.split(": ", 1)[0]):
        text = text.split(": ", 1)[1]
    for pattern, say in _RULES:
        match = pattern.match(text)
        if match:
            return say(match)
    return text
