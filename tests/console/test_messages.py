"""The admin API's schema messages as a form says them."""

from __future__ import annotations

import pytest

from llmrelay.console.messages import plain


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (
            "limits.rpm: Input should be a valid integer, unable to parse string as an integer",
            "must be a whole number, like 60",
        ),
        ("Input should be greater than or equal to 1", "must be 1 or more"),
        ("Input should be less than or equal to 604800", "must be 604800 or less"),
        (
            "slug: String should match pattern '^[a-z0-9-]+$'",
            "has characters that are not allowed here: use letters, digits and dashes",
        ),
        ("Field required", "is required"),
        ("Input should be 'off' or 'full'", "must be off or full"),
        ("Value error, an upstream model is required", "an upstream model is required"),
        ("a project named 'x' exists", "a project named 'x' exists"),
        ("routes[0].provider: unknown provider 'nope'", "unknown provider 'nope'"),
    ],
)
def test_plain_words(raw: str, said: str) -> None:
    assert plain(raw) == said
