"""The `x-llmrelay-dropped` response header: what of a client's request a translation left
out (fields, tools, input items with no equivalent in the provider's protocol, losing which
changes nothing the client relies on), so a client or an operator can see it was not sent.
What a provider cannot do at all is refused instead (a 400 naming the field)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

HEADER: Final = "x-llmrelay-dropped"


def dropped_header(names: Iterable[str]) -> str:
    """The header's value: the names, each once, in the order they were dropped, joined by
    commas (names are field paths: no comma, no newline)."""
    seen: dict[str, None] = {}
    for name in names:
        clean = name.replace(",", " ").replace("\r", " ").replace("\n", " ").strip()
        if clean:
            seen.setdefault(clean, None)
    return ",".join(seen)
