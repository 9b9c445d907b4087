"""Incremental Server-Sent Events parsing (https://html.spec.whatwg.org/#server-sent-events).

Feed bytes as they arrive; complete events come out. Three ways to take them, cheapest first:
`complete_text` (the text of all complete events, line endings normalised), `feed_data`
(each event's data) and `feed` ((event name or None, data) pairs). Comments and `id`/`retry`
fields are ignored; multi-line `data` is joined with newlines as the spec says.
"""

from __future__ import annotations

from typing import Final

SSEEvent = tuple[str | None, bytes]
#: Single bytes as ints, for `in` tests on the hot paths: CPython 3.11 looks an int up with
#: memchr, but a bytes needle first fails as an index (a TypeError raised, formatted and
#: cleared: about 1,900 instructions a test). For longer needles use `.find(...) >= 0`.
LF: Final = ord("\n")
CR: Final = ord("\r")
_DATA: Final = b"data: "
_EVENT: Final = b"event: "
#: Event names seen (a stream repeats a handful): bytes -> str without decoding each time.
_NAMES: Final[dict[bytes, str]] = {}


def _all_start(lines: list[bytes], prefix: bytes) -> bool:
    """Whether every line starts with `prefix` (lines without newlines; two C-level scans)."""
    joined = b"\n".join(lines)
    return joined.startswith(prefix) and joined.count(b"\n" + prefix) == len(lines) - 1


def _event_name(line: bytes) -> str:
    name = _NAMES.get(line)
    if name is None:
        name = line[7:].decode("utf-8", "replace")
        if len(_NAMES) < 1024:
            _NAMES[line] = name
    return name


class SSEParser:
    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def complete_text(self, chunk: bytes) -> bytes:
        """Everything up to the last complete event (ending in a blank line), with line
        endings normalised to LF; the rest waits for the next chunk."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if CR in buffer:
            # Normalise CRLF and lone CR; a trailing CR may be half of a CRLF still to come.
            keep_cr = buffer.endswith(b"\r")
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buffer = buffer[:-1] + b"\r"
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._buffer = buffer
            return b""
        self._buffer = buffer[end + 2 :]
        return buffer[: end + 2]

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return parse_events(self.complete_text(chunk))

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """Only the data of each complete event (for protocols that name no events)."""
        return event_data(self.complete_text(chunk))

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has not been terminated yet."""
        return self._buffer


def plain_data(text: bytes) -> list[bytes] | None:
    """The data of each event when `text` (from complete_text) is only single-line `data: `
    events, which is how providers write their streams (then the events are exactly the text
    between `data: ` and the blank lines); None for anything else. C-level scans only: one
    split, and one memchr over the events joined (a newline in them is another line)."""
    if not text.startswith(_DATA):
        return None
    datas = text[6:-2].split(b"\n\ndata: ")
    return None if LF in b"".join(datas) else datas


def event_data(text: bytes) -> list[bytes]:
    if not text:
        return []
    datas = plain_data(text)
    if datas is not None:
        return datas
    return [data for _, data in parse_events(text)]


def parse_events(text: bytes) -> list[SSEEvent]:
    """Every event of `text` (from complete_text). The shapes providers write — a lone
    `data: ` line, or `event: ` then `data: ` (Anthropic names every event) — are split
    without the line-by-line parse; anything else (comments, multi-line data, ids) gets it."""
    events: list[SSEEvent] = []
    if not text:
        return events
    lines = text[:-2].split(b"\n")
    if len(lines) % 3 == 2:  # perhaps only `event:` + `data:` blocks: checked at C speed
        names, datas = lines[0::3], lines[1::3]
        # Lines hold no newline, so "\nevent: " in the joined names starts a name line.
        if not b"".join(lines[2::3]) and _all_start(names, _EVENT) and _all_start(datas, _DATA):
            known = _NAMES.get
            return [(known(n) or _event_name(n), d[6:]) for n, d in zip(names, datas, strict=True)]
    for block in text[:-2].split(b"\n\n"):
        if block.startswith(_EVENT):
            head, found, data = block.partition(b"\ndata: ")
            if found and LF not in data and LF not in head:
                events.append((head[7:].decode("utf-8", "replace"), data))
                continue
        elif block.startswith(_DATA) and LF not in block:
            events.append((None, block[6:]))
            continue
        event = parse_block(block)
        if event is not None:
            events.append(event)
    return events


def parse_block(block: bytes) -> SSEEvent | None:
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
