"""Incremental Server-Sent Events parsing (https://html.spec.whatwg.org/#server-sent-events).

Feed bytes as they arrive; complete events come out as (event name or None, data) pairs.
Comments and `id`/`retry` fields are ignored; multi-line `data` is joined with newlines as
the spec says. The common single-line `data: ...` event takes a fast path.
"""

from __future__ import annotations

SSEEvent = tuple[str | None, bytes]


class SSEParser:
    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            # Normalise CRLF and lone CR; a trailing CR may be half of a CRLF still to come.
            keep_cr = buffer.endswith(b"\r")
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buffer = buffer[:-1] + b"\r"
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[SSEEvent] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                events.append((None, block[6:]))
                continue
            event = _parse_block(block)
            if event is not None:
                events.append(event)
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has not been terminated yet."""
        return self._buffer


def _parse_block(block: bytes) -> SSEEvent | None:
    name: str | None = None
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    if not data and name is None:
        return None
    return (name, b"\n".join(data))
