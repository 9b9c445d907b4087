import itertools
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrelay.protocols.anthropic_chat_stream import ChatStreamToAnthropic
from llmrelay.protocols.chat_anthropic_stream import AnthropicStreamToChat, StreamError

FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def run_anthropic(
    events: list[list[Any]], *, include_usage: bool = True
) -> tuple[AnthropicStreamToChat, list[dict[str, Any]]]:
    translator = AnthropicStreamToChat(model="claude-virtual", include_usage=include_usage)
    chunks: list[dict[str, Any]] = []
    for name, data in events:
        chunks += translator.feed(name, data)
    return translator, chunks


def without_created(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """All chunks of a stream share one `created`; the rest is compared as documented."""
    assert len({chunk["created"] for chunk in chunks}) == 1
    return [{k: v for k, v in chunk.items() if k != "created"} for chunk in chunks]


# --- Anthropic events -> Chat chunks (event sequences from the Anthropic streaming docs)


@pytest.mark.parametrize(
    "name", ["stream_text.json", "stream_tool_use.json", "stream_thinking.json"]
)
def test_documented_streams(name: str) -> None:
    fixture = load(name)
    translator, chunks = run_anthropic(
        fixture["anthropic_events"], include_usage=fixture["include_usage"]
    )
    assert without_created(chunks) == fixture["chat_chunks"]
    assert translator.finished


def test_tool_use_stream_reassembles_to_the_documented_call() -> None:
    translator, chunks = run_anthropic(load("stream_tool_use.json")["anthropic_events"])
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    calls = [
        d for c in chunks if c["choices"] for d in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert text == "Okay, let's check the weather for San Francisco, CA:"
    assert {call["index"] for call in calls} == {0}
    assert calls[0]["id"] == "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
    assert calls[0]["function"]["name"] == "get_weather"
    arguments = "".join(call["function"]["arguments"] for call in calls)
    assert json.loads(arguments) == {"location": "San Francisco, CA", "unit": "fahrenheit"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert translator.usage is not None
    assert translator.usage["prompt_tokens"] == 472
    assert translator.usage["completion_tokens"] == 89


def block_start(index: int, block: dict[str, Any]) -> list[Any]:
    return [
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    ]


def test_tool_calls_are_numbered_among_tool_blocks_only() -> None:
    json_delta = {"type": "input_json_delta", "partial_json": "{}"}
    events: list[list[Any]] = [
        ["message_start", {"type": "message_start", "message": {"id": "msg_1"}}],
        block_start(0, {"type": "text", "text": ""}),
        block_start(1, {"type": "tool_use", "id": "t1", "name": "a", "input": {}}),
        block_start(2, {"type": "tool_use", "id": "t2", "name": "b", "input": {}}),
        ["content_block_delta", {"type": "content_block_delta", "index": 2, "delta": json_delta}],
    ]
    _, chunks = run_anthropic(events, include_usage=False)
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[1:]]
    assert [(call["index"], call.get("id")) for call in calls] == [(0, "t1"), (1, "t2"), (1, None)]


def test_cache_usage_and_cumulative_message_delta_counts() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "usage": {
                "input_tokens": 12,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
        },
    }
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
        "usage": {"input_tokens": 12, "cache_read_input_tokens": 4000, "output_tokens": 30},
    }
    translator, chunks = run_anthropic(
        [
            ["message_start", start],
            ["message_delta", delta],
            ["message_stop", {"type": "message_stop"}],
        ]
    )
    expected = {
        "prompt_tokens": 4112,
        "completion_tokens": 30,
        "total_tokens": 4142,
        "prompt_tokens_details": {"cached_tokens": 4000},
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 4000,
    }
    assert translator.usage == expected
    assert chunks[1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == expected


def test_finished_after_message_delta_with_a_stop_reason() -> None:
    translator = AnthropicStreamToChat(model="m", include_usage=False)
    translator.feed("message_start", {"type": "message_start", "message": {"id": "msg_1"}})
    assert not translator.finished
    out = translator.feed(
        "message_delta", {"type": "message_delta", "delta": {"stop_reason": "refusal"}}
    )
    assert translator.finished
    assert out[0]["choices"][0]["finish_reason"] == "content_filter"
    assert translator.feed("message_stop", {"type": "message_stop"}) == []


def test_unreported_usage_stays_unknown() -> None:
    translator, chunks = run_anthropic(load("stream_thinking.json")["anthropic_events"])
    assert translator.usage is None
    assert all(chunk["choices"] for chunk in chunks)


def test_an_error_event_raises() -> None:
    translator = AnthropicStreamToChat(model="m", include_usage=True)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(StreamError) as caught:
        translator.feed("error", error)
    assert caught.value.error_type == "overloaded_error"
    assert caught.value.message == "Overloaded"


def test_pings_and_unknown_events_produce_nothing() -> None:
    translator = AnthropicStreamToChat(model="m", include_usage=True)
    assert translator.feed("ping", {"type": "ping"}) == []
    assert translator.feed("future_event", {"type": "future_event"}) == []
    assert translator.feed(None, {"type": "content_block_stop", "index": 0}) == []


# --- Chat chunks -> Anthropic events


def run_chat(chunks: list[dict[str, Any]]) -> tuple[ChatStreamToAnthropic, list[list[Any]]]:
    translator = ChatStreamToAnthropic(model="gpt-virtual", message_id="msg_test")
    events: list[list[Any]] = []
    for chunk in chunks:
        events += [[name, data] for name, data in translator.feed(chunk)]
    return translator, events


def test_text_then_parallel_tool_calls_then_usage() -> None:
    fixture = load("chat_stream_parallel_tools.json")
    translator, events = run_chat(fixture["chat_chunks"])
    assert events == fixture["anthropic_events"]
    assert all(name == data["type"] for name, data in events)
    assert translator.finish() == []
    arguments: dict[int, str] = {}
    for name, data in events:
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
            arguments[data["index"]] = (
                arguments.get(data["index"], "") + data["delta"]["partial_json"]
            )
    assert {i: json.loads(text) for i, text in arguments.items()} == {
        1: {"location": "Paris"},
        2: {"location": "Tokyo"},
    }


def test_message_delta_waits_for_the_usage_chunk() -> None:
    chunks = load("chat_stream_parallel_tools.json")["chat_chunks"]
    translator = ChatStreamToAnthropic(model="gpt-virtual", message_id="msg_test")
    for chunk in chunks[:-2]:
        translator.feed(chunk)
    at_finish = translator.feed(chunks[-2])
    assert [name for name, _ in at_finish] == ["content_block_stop"]
    at_usage = translator.feed(chunks[-1])
    assert [name for name, _ in at_usage] == ["message_delta", "message_stop"]


def test_finish_without_a_usage_chunk() -> None:
    translator, events = run_chat(
        [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        ]
    )
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    ]
    assert translator.finish() == [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                "usage": {"output_tokens": 0},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    assert translator.finish() == []


def test_usage_in_the_finish_chunk_ends_the_message_at_once() -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    _, events = run_chat(
        [
            {
                "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
                "usage": usage,
            }
        ]
    )
    assert events[-2] == [
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {
                "output_tokens": 2,
                "input_tokens": 9,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        },
    ]
    assert events[-1][0] == "message_stop"


def test_an_empty_stream_is_still_a_whole_message() -> None:
    translator = ChatStreamToAnthropic(model="m", message_id="msg_1")
    assert [name for name, _ in translator.finish()] == [
        "message_start",
        "message_delta",
        "message_stop",
    ]


# --- property: Chat stream -> Anthropic events -> Chat stream keeps text, calls and usage

argument_values = st.dictionaries(
    st.text(max_size=5), st.integers(-1000, 1000) | st.text(max_size=6), max_size=3
)


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(cut, len(text)) for cut in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def chat_streams(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str, list[tuple[str, str, str]]]:
    text = draw(st.text(max_size=20))
    calls = [
        (f"call_{i}", draw(st.sampled_from(["get_weather", "search"])), json.dumps(args))
        for i, args in enumerate(draw(st.lists(argument_values, max_size=3)))
    ]
    cuts = st.lists(st.integers(0, 40), max_size=4)
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in split(text, draw(cuts)) if piece]
    for index, (call_id, name, arguments) in enumerate(calls):
        first, *rest = split(arguments, draw(cuts))
        head = {"index": index, "id": call_id, "type": "function"}
        deltas.append({"tool_calls": [{**head, "function": {"name": name, "arguments": first}}]})
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": p}}]} for p in rest]
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas
    ]
    finish = "tool_calls" if calls else "stop"
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    usage = {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57}
    chunks.append({"choices": [], "usage": usage})
    return chunks, text, calls


@settings(deadline=None)
@given(chat_streams())
def test_chat_stream_survives_anthropic_and_back(
    stream: tuple[list[dict[str, Any]], str, list[tuple[str, str, str]]],
) -> None:
    chunks, text, calls = stream
    forward = ChatStreamToAnthropic(model="m", message_id="msg_1")
    events = [event for chunk in chunks for event in forward.feed(chunk)] + forward.finish()
    backward = AnthropicStreamToChat(model="m", include_usage=True)
    out = [chunk for name, data in events for chunk in backward.feed(name, data)]
    content = ""
    seen: dict[int, list[str]] = {}
    finish_reasons = []
    for chunk in out:
        for choice in chunk["choices"]:
            content += choice["delta"].get("content") or ""
            for call in choice["delta"].get("tool_calls", []):
                entry = seen.setdefault(
                    call["index"], [call.get("id"), call["function"].get("name"), ""]
                )
                entry[2] += call["function"]["arguments"]
            if choice["finish_reason"]:
                finish_reasons.append(choice["finish_reason"])
    assert content == text
    assert [tuple(seen[i]) for i in sorted(seen)] == calls
    assert finish_reasons == ["tool_calls" if calls else "stop"]
    assert backward.finished
    assert out[-1]["usage"]["prompt_tokens"] == 50
    assert out[-1]["usage"]["completion_tokens"] == 7


@pytest.mark.parametrize("include_usage", [True, False])
def test_the_text_event_template_writes_what_the_chunk_serialises_to(include_usage: bool) -> None:
    """The byte template for text deltas must never drift from the chunk it stands for."""
    translator = AnthropicStreamToChat(model="claude-x", include_usage=include_usage)
    start = {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}}
    translator.feed("message_start", start)
    for text in ["Hello", ' "quoted" \\ back\nslash', "ünïcödé ✓", "</script>"]:
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": text},
        }
        (chunk,) = translator.feed("content_block_delta", delta)
        assert translator.text_event(text) == b"data: " + orjson.dumps(chunk) + b"\n\n"
