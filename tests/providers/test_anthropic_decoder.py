"""The anthropic adapter's stream decoder: its shortcuts for text deltas and two-line blocks
must give exactly what parsing every event and translating it gives, and so must its direct
path (the client's events written by the decoder, passed on unread by the chat relay)."""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.relay import ChatStreamRelay
from llmrelay.protocols.chat_anthropic_stream import AnthropicStreamToChat, StreamError
from llmrelay.protocols.openai import ModelRename
from llmrelay.protocols.sse import SSEParser, parse_events
from llmrelay.providers.anthropic_stream import AnthropicChatDecoder
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import UpstreamError
from llmrelay.providers.translated import TranslatedResponse
from llmrelay.snapshot.model import ProviderSnap, RouteSnap
from tests.gateway.test_relay import ChunkedBody


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
    decoder = AnthropicChatDecoder("m", include_usage, True)
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


# -- the direct path: the decoder writes the client's events, the chat relay trusts them --

VIRTUAL = "chat-virtual"
PROVIDER = ProviderSnap(
    "p", "up", "anthropic", "http://x", None, MappingProxyType({}), 5, 5, 5, 5, None
)
ROUTE = RouteSnap("r", PROVIDER, "m", 0, 1.0, None, False, 0)


Outcome = tuple[list[dict[str, Any]] | str, tuple[int | None, int | None], int, int | None]


async def _client(response: UpstreamResponse, client_asked: bool) -> Outcome:
    """What the client gets through the chat relay: its events (or the error that failed
    the route before any), the recorded usage, the malformed count and the status."""
    record = CallRecord("req", "chat.completions", 0.0)
    malformed: list[int] = []
    relay = ChatStreamRelay(
        ROUTE,
        response,
        request_id="req",
        choices=1,
        usage_requested=client_asked,
        usage_coming=True,
        record=record,
        rename=ModelRename(VIRTUAL),
        on_malformed=lambda: malformed.append(1),
        on_end=lambda r: None,
    )
    try:
        await relay.prime(Deadlines(asyncio.get_running_loop()))
    except UpstreamError as exc:
        return type(exc).__name__, (None, None), len(malformed), None
    out = await relay.read_rest()
    events: list[dict[str, Any]] = []
    for data in SSEParser().feed_data(out):
        event = orjson.loads(data) if data != b"[DONE]" else {"done": True}
        event.pop("created", None)
        events.append(event)
    usage = (record.prompt_tokens, record.completion_tokens)
    return events, usage, len(malformed), record.status_code


class _FullParse:
    """A decoder that parses and translates every event, nothing skipped: in a
    TranslatedResponse (it has no direct path) the chat relay examines what it writes."""

    def __init__(self) -> None:
        self._parser = SSEParser()
        self._translator = AnthropicStreamToChat(model="m", include_usage=True)

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def error(self, status: int, raw: bytes) -> tuple[str, str | None]:
        raise NotImplementedError

    def retry_after(self, raw: bytes) -> str | None:
        return None

    def chunks(self, chunk: bytes) -> list[dict[str, Any] | bytes | None]:
        out: list[dict[str, Any] | bytes | None] = []
        for name, data in self._parser.feed(chunk):
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                out.append(None)
                continue
            if not isinstance(event, dict):
                continue
            try:
                out += self._translator.feed(name, event)
            except StreamError as exc:
                out.append({"error": {"message": exc.message, "type": exc.error_type}})
        return out

    def end(self) -> list[dict[str, Any] | bytes | None]:
        return []


def _tool_block(index: int) -> bytes:
    start = {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    }
    delta = {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'},
    }
    stop = {"type": "content_block_stop", "index": index}
    return b"".join(
        [
            _event("content_block_start", start),
            _event("content_block_delta", delta),
            _event("content_block_stop", stop),
        ]
    )


_EXTRAS = {
    "none": b"",
    "malformed": b"event: content_block_delta\ndata: {not json\n\n",
    "error": _event(
        "error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    ),
    "tool": b"",
}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(max_size=8), max_size=6),
    st.sampled_from([0, 1]),
    st.booleans(),
    st.sampled_from(sorted(_EXTRAS)),
    st.integers(min_value=0, max_value=7),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=3000), max_size=5),
)
def test_the_direct_path_gives_the_client_what_the_full_parse_gives(
    texts: list[str],
    index: int,
    odd_block: bool,
    extra: str,
    at: int,
    client_asked: bool,
    cuts: list[int],
) -> None:
    body = _stream(texts, index, odd_block)
    blocks = body[:-2].split(b"\n\n")
    insert = _EXTRAS[extra] or (_tool_block(index + 1) if extra == "tool" else b"")
    if insert:
        position = min(3 + at, len(blocks) - 3)  # among the deltas, before the message's end
        blocks.insert(position, insert[:-2])
        body = b"\n\n".join(blocks) + b"\n\n"
    points = sorted({min(c, len(body)) for c in cuts})
    chunks = [
        b for a, z in zip([0, *points], [*points, len(body)], strict=True) if (b := body[a:z])
    ]
    direct = TranslatedResponse(ChunkedBody(chunks), AnthropicChatDecoder("m", True, True))
    full = TranslatedResponse(ChunkedBody(chunks), _FullParse())
    assert asyncio.run(_client(direct, client_asked)) == asyncio.run(_client(full, client_asked))
