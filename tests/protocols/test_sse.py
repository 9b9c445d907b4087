from hypothesis import given
from hypothesis import strategies as st

from llmrelay.protocols.sse import SSEEvent, SSEParser, parse_block, parse_events, plain_data

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


def _data_only(events: list[SSEEvent]) -> list[bytes]:
    return [data for _, data in events]


@given(
    st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12),
    st.booleans(),
)
def test_data_only_parsing_agrees_with_full_parsing_for_any_split(
    cuts: list[int], crlf: bool
) -> None:
    data = STREAM.replace(b"\n", b"\r\n") if crlf else STREAM
    points = sorted({min(c, len(data) - 1) for c in cuts})
    full, fast = SSEParser(), SSEParser()
    got_full: list[SSEEvent] = []
    got_fast: list[bytes] = []
    start = 0
    for point in [*points, len(data)]:
        got_full += full.feed(data[start:point])
        got_fast += fast.feed_data(data[start:point])
        start = point
    assert got_fast == _data_only(got_full) == _data_only(EXPECTED)


@given(
    st.lists(
        st.one_of(
            st.binary(max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b),
            st.just(b"data:no-space"),
            st.just(b": comment"),
            st.just(b"data: a\ndata: b"),
        ),
        max_size=8,
    ),
    st.integers(min_value=1, max_value=50),
)
def test_fast_path_never_differs_from_the_spec_parser(lines: list[bytes], cut: int) -> None:
    stream = b"".join(
        (line if line.startswith((b"data", b":")) else b"data: " + line) + b"\n\n" for line in lines
    )
    full, fast = SSEParser(), SSEParser()
    cut = min(cut, len(stream))
    assert (plain_data(stream) is not None) == all(
        not line.startswith((b"data:n", b":", b"data: a\n")) for line in lines
    ) or not lines
    got_full = full.feed(stream[:cut]) + full.feed(stream[cut:])
    got_fast = fast.feed_data(stream[:cut]) + fast.feed_data(stream[cut:])
    assert got_fast == _data_only(got_full)


_LINE = st.binary(max_size=20).filter(lambda b: b"\n" not in b and b"\r" not in b)


@given(
    st.lists(
        st.one_of(
            st.builds(lambda n, d: b"event: " + n + b"\ndata: " + d, _LINE, _LINE),
            st.builds(lambda d: b"data: " + d, _LINE),
            st.builds(lambda n, d: b"event: " + n + b"\nid: 7\ndata: " + d, _LINE, _LINE),
            st.builds(lambda n: b"event:" + n, _LINE),
            st.just(b"event: a\ndata: x\ndata: y"),
            st.just(b": keep-alive"),
        ),
        max_size=8,
    )
)
def test_named_events_split_fast_exactly_as_the_spec_parses_them(blocks: list[bytes]) -> None:
    """The shortcut for `event:` + `data:` blocks gives what the line-by-line parse gives."""
    text = b"".join(block + b"\n\n" for block in blocks)
    expected = [e for e in (parse_block(b) for b in blocks) if e is not None]
    assert parse_events(text) == expected
