"""The anthropic adapter's stream decoder: its shortcuts for text deltas and two-line blocks
must give exactly what parsing every event and translating it gives."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.protocols.chat_anthropic_stream import AnthropicStreamToChat
from llmrelay.protocols.sse import parse_events
from llmrelay.providers.anthropic import _Decoder


def _event(name: str, data: dict[str, Any], extra: bytes = b"") -> bytes:
    return b"event: " + name.encode() + b"\n" + extra + b"data: " + orjson.dumps(data) + b"\n\n"


def _stream(texts: list[str], index: int, odd_block: bool) -> bytes:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    parts = [_event("message_start", {"type": "message_start", "message": message})]
    start = {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "text", "text": ""},
    }
    parts.append(_event("content_block_start", start))
    parts.append(_event("ping", {"type": "ping"}))
    for i, text in enumerate(texts):
        delta = {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        }
        extra = b"id: 7\n" if odd_block and i == 0 else b""
        parts.append(_event("content_block_delta", delta, extra))
    parts.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 9},
    }
    parts.append(_event("message_delta", stop))
    parts.append(_event("message_stop", {"type": "message_stop"}))
    return b"".join(parts)


def _reference(body: bytes, include_usage: bool) -> list[bytes]:
    """Every event parsed and translated through dicts, nothing skipped."""
    translator = AnthropicStreamToChat(model="m", include_usage=include_usage)
    chunks: list[bytes] = []
    for name, data in parse_events(body):
        for chunk in translator.feed(name, orjson.loads(data)):
            chunks.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    return chunks


def _decoded(body: bytes, include_usage: bool, cut: int) -> list[bytes]:
    decoder = _Decoder("m", include_usage, True)
    out = decoder.chunks(body[:cut]) + decoder.chunks(body[cut:]) + decoder.end()
    return [
        c if isinstance(c, bytes) else b"data: " + orjson.dumps(c) + b"\n\n"
        for c in out
        if c is not None
    ]


@settings(max_examples=200)
@given(
    st.lists(st.text(max_size=12), max_size=6),
    st.sampled_from([0, 1]),
    st.booleans(),
    st.booleans(),
    st.integers(min_value=0, max_value=4000),
)
def test_the_shortcuts_translate_exactly_as_the_full_parse(
    texts: list[str], index: int, odd_block: bool, include_usage: bool, cut: int
) -> None:
    body = _stream(texts, index, odd_block)
    cut = min(cut, len(body))
    decoded = _decoded(body, include_usage, cut)
    reference = _reference(body, include_usage)
    # The placeholder id differs between two translators until message_start; it never
    # reaches a chunk here (message_start comes first), so the bytes must be equal.
    assert [orjson.loads(c[6:]) | {"created": 0} for c in decoded] == [
        orjson.loads(c[6:]) | {"created": 0} for c in reference
    ]
