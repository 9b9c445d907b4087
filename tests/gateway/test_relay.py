"""The stream relay against a plain reference reading of the same stream: the same events
reach the client, whatever way the provider's bytes are split into chunks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.relay import ChatStreamRelay
from llmrelay.protocols.openai import ModelRename
from llmrelay.protocols.sse import SSEParser, event_data
from llmrelay.snapshot.model import ProviderSnap, RouteSnap

UPSTREAM = "gpt-up"
REPORTED = "gpt-up-2024-07-18"  # what the provider names in its answers (a dated snapshot)
VIRTUAL = "chat-virtual"
PROVIDER = ProviderSnap(
    "p", "up", "openai_compatible", "http://x/v1", None, MappingProxyType({}), 5, 5, 5, 5, None
)
ROUTE = RouteSnap("r", PROVIDER, UPSTREAM, 0, 1.0, None, False, 0)


class ChunkedBody:
    """An upstream response body given as fixed chunks."""

    status = 200

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)
        self.released = False

    def header(self, name: str) -> str | None:
        return None

    async def read(self) -> bytes:
        return b"".join(self._chunks)

    async def next_chunk(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""

    def release(self) -> None:
        self.released = True


def _event(
    delta: dict[str, Any],
    finish: str | None = None,
    *,
    spaced: bool = False,
    openai_style: bool = False,
) -> bytes:
    """A chunk; `openai_style` adds what OpenAI's own chunks carry (`logprobs`, and
    `"usage":null` on every chunk of a stream that asked for usage)."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    payload: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": REPORTED,
        "choices": [choice],
    }
    if openai_style:
        choice["logprobs"] = None
        payload["usage"] = None
    text = orjson.dumps(payload)
    if spaced:  # another serializer's style: the byte rename cannot match it
        text = text.replace(b'":', b'": ').replace(b",", b", ")
    return b"data: " + text + b"\n\n"


def _usage_event(*, spaced: bool = False) -> bytes:
    payload = {
        "id": "c1",
        "model": REPORTED,
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    text = orjson.dumps(payload)
    if spaced:
        text = text.replace(b'":', b'": ')
    return b"data: " + text + b"\n\n"


def _chat_relay(
    body: ChunkedBody,
    record: CallRecord,
    *,
    rename: ModelRename | None = None,
    client_asked: bool = True,
    on_malformed: Callable[[], None] = lambda: None,
    on_end: Callable[[CallRecord], None] = lambda r: None,
) -> ChatStreamRelay:
    return ChatStreamRelay(
        ROUTE,
        body,
        request_id="req",
        choices=1,
        usage_requested=client_asked,
        usage_coming=True,
        record=record,
        rename=rename or ModelRename(VIRTUAL),
        on_malformed=on_malformed,
        on_end=on_end,
    )


async def _relay(
    chunks: list[bytes], rename: ModelRename | None = None, *, client_asked: bool = True
) -> tuple[bytes, CallRecord, int]:
    """The client's stream as the gateway sends it: whole when priming read all of it
    (`whole`), else event by event; either way the record is ended once and the upstream
    response released."""
    loop = asyncio.get_running_loop()
    record = CallRecord("req", "chat.completions", 0.0)
    malformed: list[int] = []
    ended: list[CallRecord] = []
    body = ChunkedBody(chunks)
    relay = _chat_relay(
        body,
        record,
        rename=rename,
        client_asked=client_asked,
        on_malformed=lambda: malformed.append(1),
        on_end=ended.append,
    )
    await relay.prime(Deadlines(loop))
    whole = relay.whole()
    out = await relay.read_rest() if whole is None else whole
    assert ended == [record] and body.released
    return out, record, len(malformed)


def _reference(stream: bytes) -> tuple[list[dict[str, Any]], int]:
    """What the client must get, read naively: every event in order up to the one that
    completes the stream (finish reason, then usage, as asked), malformed ones left out,
    the model renamed."""
    events: list[dict[str, Any]] = []
    malformed = 0
    finished = usage = False
    for _, data in SSEParser().feed(stream):
        if data == b"[DONE]":
            break
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            malformed += 1
            continue
        if "model" in event:
            event["model"] = VIRTUAL
        events.append(event)
        finished = finished or any(c.get("finish_reason") for c in event.get("choices", []))
        usage = usage or bool(event.get("usage"))
        if finished and usage:
            break
    return events, malformed


def _events(out: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(d) for d in SSEParser().feed_data(out) if d != b"[DONE]"]


def _split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(stream)) for c in cuts})
    ends = [*points, len(stream)]
    return [stream[a:b] for a, b in zip([0, *points], ends, strict=True) if b > a]


STREAM_VARIANTS = {
    "spaced finish": [_event({"content": "x"}), _event({}, "stop", spaced=True), _usage_event()],
    "spaced usage": [_event({"content": "x"}), _event({}, "stop"), _usage_event(spaced=True)],
    "content first": [_event({"content": "first"}), _event({}, "length"), _usage_event()],
}

STREAM_PARTS = [
    _event({"role": "assistant", "content": ""}),
    _event({"content": "Hel"}),
    _event({"content": "lo"}, spaced=True),
    b": keep-alive comment\n\n",
    b"data: {not json\n\n",
    _event({"content": " wor"}, openai_style=True),
    _event({"content": "ld"}),
    _event({}, "stop"),
    _usage_event(),
    b"data: [DONE]\n\n",
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=2000), max_size=10),
    st.lists(st.booleans(), min_size=len(STREAM_PARTS), max_size=len(STREAM_PARTS)),
)
def test_fast_path_equals_event_by_event_for_any_split(cuts: list[int], keep: list[bool]) -> None:
    parts = [p for p, k in zip(STREAM_PARTS, keep, strict=True) if k or b"stop" in p]
    stream = b"".join(parts)
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [
        stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True) if b > a
    ]
    out, record, malformed = asyncio.run(_relay(chunks))
    expected, expected_malformed = _reference(b"".join(chunks))
    assert _events(out) == expected
    assert out.endswith(b"data: [DONE]\n\n") and out.count(b"[DONE]") == 1
    usage: dict[str, int] = next((e["usage"] for e in expected if e.get("usage")), {})
    assert (record.prompt_tokens, record.completion_tokens, record.status_code) == (
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
        200,
    )
    assert malformed == expected_malformed


async def test_the_client_sees_only_the_virtual_model_and_one_done() -> None:
    out, record, malformed = await _relay([b"".join(STREAM_PARTS)])
    assert REPORTED.encode() not in out and UPSTREAM.encode() not in out
    assert out.count(b"[DONE]") == 1 and out.endswith(b"data: [DONE]\n\n")
    assert b"{not json" not in out and malformed == 1
    assert b"keep-alive" not in out
    datas = event_data(out)
    models = {orjson.loads(d)["model"] for d in datas if d != b"[DONE]"}
    assert models == {VIRTUAL}
    text = "".join(
        c["delta"].get("content") or ""
        for d in datas
        if d != b"[DONE]"
        for c in orjson.loads(d)["choices"]
    )
    assert text == "Hello world"
    assert (record.prompt_tokens, record.completion_tokens) == (3, 2)


async def test_usage_the_gateway_asked_for_is_recorded_but_not_passed_on() -> None:
    on_finish = _event({}, "stop").replace(
        b'"choices"', b'"usage":{"prompt_tokens":5,"completion_tokens":1},"choices"'
    )
    for tail in ([_event({}, "stop"), _usage_event()], [on_finish]):
        stream = b"".join([STREAM_PARTS[0], _event({"content": "Hi"}), *tail, b"data: [DONE]\n\n"])
        out, record, malformed = await _relay([stream], client_asked=False)
        chunks = [orjson.loads(d) for d in event_data(out) if d != b"[DONE]"]
        assert all(c.get("usage") is None and c["choices"] for c in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert out.endswith(b"data: [DONE]\n\n") and malformed == 0
        assert record.prompt_tokens in (3, 5) and record.completion_tokens in (2, 1)


async def test_a_stream_read_whole_while_priming_is_answered_whole() -> None:
    stream = b"".join(STREAM_PARTS)
    record = CallRecord("req", "chat.completions", 0.0)
    relay = _chat_relay(ChunkedBody([stream]), record)
    await relay.prime(Deadlines(asyncio.get_running_loop()))
    whole = relay.whole()
    assert whole is not None and relay.ended
    assert _events(whole) == _reference(stream)[0]
    assert whole.endswith(b"data: [DONE]\n\n") and whole.count(b"[DONE]") == 1
    assert record.delivered_events > 0
    # One chunk short of the end: more is to come, so the stream goes event by event.
    parts = [b"".join(STREAM_PARTS[:3]), b"".join(STREAM_PARTS[3:])]
    relay = _chat_relay(ChunkedBody(parts), CallRecord("req", "chat.completions", 0.0))
    await relay.prime(Deadlines(asyncio.get_running_loop()))
    assert relay.whole() is None and not relay.ended


async def test_events_after_completion_are_not_passed_on() -> None:
    extra = _event({"content": "after the end"})
    out, _, _ = await _relay(
        [b"".join([*STREAM_PARTS[:2], _event({}, "stop"), _usage_event(), extra])]
    )
    assert b"after the end" not in out
    assert out.endswith(b"data: [DONE]\n\n")


async def test_an_error_event_after_content_ends_the_stream_with_an_error() -> None:
    error = b'data: {"error": {"message": "overloaded"}}\n\n'
    out, record, _ = await _relay([STREAM_PARTS[0] + STREAM_PARTS[1], error])
    assert b"[DONE]" not in out
    assert b"overloaded" in out and b"stream_interrupted" in out
    assert record.status_code == 502


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(sorted(STREAM_VARIANTS)),
    st.lists(st.integers(min_value=1, max_value=1000), max_size=6),
)
def test_other_spellings_give_the_same_result_on_both_paths(variant: str, cuts: list[int]) -> None:
    stream = b"".join(STREAM_VARIANTS[variant]) + b"data: [DONE]\n\n"
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [
        stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True) if b > a
    ]
    out, record, _ = asyncio.run(_relay(chunks))
    assert _events(out) == _reference(stream)[0]
    assert out.endswith(b"data: [DONE]\n\n")
    assert (record.prompt_tokens, record.completion_tokens) == (3, 2)


async def test_a_later_stream_renames_from_what_an_earlier_one_learnt_or_learns_anew() -> None:
    rename = ModelRename(VIRTUAL)
    stream = b"".join(STREAM_PARTS)
    first, _, _ = await _relay([stream], rename)
    second, _, _ = await _relay([stream[:300], stream[300:]], rename)
    renamed = stream.replace(REPORTED.encode(), b"gpt-up-2025-01-01")  # the provider moved on
    third, _, _ = await _relay([renamed], rename)
    expected = _events(first)
    assert _events(second) == expected and _events(third) == expected
    assert {e["model"] for e in expected} == {VIRTUAL}
    no_role = b"".join(STREAM_PARTS[1:]).replace(REPORTED.encode(), b"gpt-up-2026-01-01")
    fourth, _, _ = await _relay([no_role], rename)
    assert {e["model"] for e in _events(fourth)} == {VIRTUAL}


# -- bursts: a whole answer in one read, its leading run of deltas taken in one piece ----------


def _burst(*middle: bytes, opening: bool = True, usage: bool = True) -> list[bytes]:
    """A stream as a provider writes it: the opening delta, content deltas, `middle`, the
    finish, the usage chunk and [DONE]."""
    head = [_event({"role": "assistant", "content": ""})] if opening else []
    words = [_event({"content": w}) for w in ("Hel", "lo", " the", "re")]
    tail = [_event({}, "stop"), *([_usage_event()] if usage else []), b"data: [DONE]\n\n"]
    return [*head, *words[:2], *middle, *words[2:], *tail]


BURSTS = {
    "plain": _burst(),
    "no opening": _burst(opening=False),
    "no usage chunk": _burst(usage=False),
    "a comment in the run": _burst(b": keep-alive\n\n"),
    "a spaced delta in the run": _burst(_event({"content": "!"}, spaced=True)),
    "a tool call in the run": _burst(_event({"tool_calls": [{"index": 0, "id": "t"}]})),
    "malformed in the run": _burst(b"data: {not json\n\n"),
    "two lines in one event": _burst(b'data: {"a":\ndata: 1}\n\n'),
    "after the end": [*_burst()[:-1], _event({"content": "late"}), b"data: [DONE]\n\n"],
    "usage on the finish": [
        *_burst(usage=False)[:-2],
        _event({}, "stop").replace(
            b'"choices"', b'"usage":{"prompt_tokens":3,"completion_tokens":2},"choices"'
        ),
        b"data: [DONE]\n\n",
    ],
}


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(BURSTS)),
    st.lists(st.integers(min_value=1, max_value=3000), max_size=4),
    st.booleans(),
    st.booleans(),
)
def test_a_burst_reads_as_its_events_read_one_by_one(
    name: str, cuts: list[int], client_asked: bool, learnt: bool
) -> None:
    """Whole or cut anywhere, asked for usage or not, with the provider's name for the model
    known from an earlier stream or not: the client gets what a plain reading gives."""
    stream = b"".join(BURSTS[name])
    rename = ModelRename(VIRTUAL)
    if learnt:
        rename.reported[UPSTREAM] = rename.pattern(REPORTED)
    out, record, malformed = asyncio.run(
        _relay(_split(stream, cuts), rename, client_asked=client_asked)
    )
    expected, expected_malformed = _reference(stream)
    if not client_asked:  # the gateway's own usage chunk is not passed on
        expected = [e for e in expected if e.get("choices") or not e.get("usage")]
        for event in expected:
            event.pop("usage", None)
        for event in (got := _events(out)):
            event.pop("usage", None)
    else:
        got = _events(out)
    assert got == expected
    assert out.endswith(b"data: [DONE]\n\n") and out.count(b"[DONE]") == 1
    assert malformed == expected_malformed
    if name != "no usage chunk":
        assert (record.prompt_tokens, record.completion_tokens) == (3, 2)


def test_a_plain_burst_is_taken_as_one_run() -> None:
    """The standard burst goes through `_take_run` (not the per-event loop), and a run with
    anything unusual in it does not."""
    rename = ModelRename(VIRTUAL)
    rename.reported[UPSTREAM] = pattern = rename.pattern(REPORTED)
    for name, expected in (("plain", True), ("a comment in the run", False)):
        text = b"".join(BURSTS[name])
        renamed = text.count(pattern)
        text = text.replace(pattern, rename.replacement)
        relay = _chat_relay(ChunkedBody([]), CallRecord("req", "chat.completions", 0.0))
        out: list[bytes] = []
        assert relay._take_run(text, renamed, out, True) is expected
        assert bool(out) is expected
