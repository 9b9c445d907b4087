"""Reading the mock upstream's raw answers: server-sent events, and streams that are cut."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson
import pytest


def sse_events(raw: bytes, separator: bytes = b"\n\n") -> list[tuple[str, dict[str, Any]]]:
    """(event name or "", data) of each server-sent event in `raw`."""
    events = []
    for block in filter(None, raw.split(separator)):
        fields = dict(line.split(": ", 1) for line in block.decode().splitlines())
        events.append((fields.get("event", ""), orjson.loads(fields["data"])))
    return events


def read_until_cut(url: str, **request: Any) -> bytes:
    """What a streamed answer sent before its connection was cut (which must happen)."""
    chunks: list[bytes] = []
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        httpx2.stream("POST", url, timeout=10, **request) as response,
    ):
        chunks.extend(response.iter_bytes())
    return b"".join(chunks)
