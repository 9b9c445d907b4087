from hypothesis import given
from hypothesis import strategies as st

from llmrelay.protocols.sse import SSEEvent, SSEParser

STREAM = (
    b'data: {"a":1}\n\n: comment\n\nevent: ping\ndata: x\n\n'
    b"data: line1\ndata: line2\n\ndata: [DONE]\n\n"
)
EXPECTED: list[SSEEvent] = [
    (None, b'{"a":1}'),
    ("ping", b"x"),
    (None, b"line1\nline2"),
    (None, b"[DONE]"),
]


def test_whole_stream() -> None:
    assert SSEParser().feed(STREAM) == EXPECTED


def test_crlf_line_endings() -> None:
    assert SSEParser().feed(STREAM.replace(b"\n", b"\r\n")) == EXPECTED


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12), st.booleans())
def test_any_split_gives_the_same_events(cuts: list[int], crlf: bool) -> None:
    data = STREAM.replace(b"\n", b"\r\n") if crlf else STREAM
    points = sorted({min(c, len(data) - 1) for c in cuts})
    parser = SSEParser()
    events = []
    start = 0
    for point in [*points, len(data)]:
        events += parser.feed(data[start:point])
        start = point
    assert events == EXPECTED
    assert parser.pending == b""


def test_an_unterminated_event_stays_pending() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"a"') == []
    assert parser.pending == b'data: {"a"'
