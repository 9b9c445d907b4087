"""The `x-llmrelay-dropped` response header: the client's fields a translation left out.

A request translated to another protocol may carry fields the provider has no place for
(Anthropic's `context_management`, `cache_control`, a `web_search` server tool reaching an
OpenAI model...). The translators name them (providers/messages_bridge.py puts the list on
the UpstreamRequest; the executor copies the served attempt's onto the CallRecord) and the
answer names them in this header, comma-separated, so an operator or a client sees what did
not reach the model. Names come from the client's JSON keys: only names of field-path
characters are written (others are counted as `other`), and the header stays bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

HEADER: Final = b"x-llmrelay-dropped"
#: The longest header value written (names past it are left out of the header, not the log).
MAX_LENGTH: Final = 1024
_NAME: Final = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,100}")


def header_value(names: Iterable[str]) -> bytes | None:
    """The header's value for `names` (None: nothing was dropped)."""
    written: list[str] = []
    length = 0
    for name in names:
        if _NAME.fullmatch(name) is None:
            name = "other"
        if name in written:
            continue
        length += len(name) + 1
        if length > MAX_LENGTH:
            break
        written.append(name)
    return ",".join(written).encode() if written else None


def add_header(headers: list[tuple[bytes, bytes]], names: Iterable[str]) -> None:
    """Append the header to a response's `headers` when anything was dropped."""
    value = header_value(names)
    if value is not None:
        headers.append((HEADER, value))
