from llmrelay.gateway.dropped import HEADER, MAX_LENGTH, add_header, header_value


def test_names_are_written_comma_separated_once_each() -> None:
    assert header_value(["context_management", "cache_control", "web_search"]) == (
        b"context_management,cache_control,web_search"
    )
    assert header_value(["a", "a"]) == b"a"
    assert header_value([]) is None


def test_a_name_that_is_no_field_path_cannot_reach_the_header() -> None:
    value = header_value(["ok.field", "evil\r\nSet-Cookie: x=1", "ünicode", "tools[0]"])
    assert value == b"ok.field,other,tools[0]"


def test_the_header_is_bounded() -> None:
    value = header_value([f"field_{i:04d}" for i in range(500)])
    assert value is not None and len(value) <= MAX_LENGTH


def test_added_only_when_something_was_dropped() -> None:
    headers: list[tuple[bytes, bytes]] = []
    add_header(headers, ())
    assert headers == []
    add_header(headers, ("web_search",))
    assert headers == [(HEADER, b"web_search")]
