"""Gemini streamGenerateContent?alt=sse events -> Chat Completions chunks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from llmrelay.protocols.chat_gemini_stream import GeminiStreamToChat

FIXTURES = Path(__file__).parent / "fixtures" / "gemini"
CALL_ID = re.compile(r"call_[0-9a-f]{24}")


def run(translator: GeminiStreamToChat, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    chunks = [chunk for event in events for chunk in translator.feed(event)]
    return chunks + translator.finish()


def normalised(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chunks without `created` (one value shared by all) and with each generated tool
    call id checked and replaced by "<call id>"."""
    assert len({chunk["created"] for chunk in chunks}) == 1
    out = []
    for chunk in chunks:
        chunk = {k: v for k, v in chunk.items() if k != "created"}
        for choice in chunk["choices"]:
            for call in choice["delta"].get("tool_calls", []):
                assert CALL_ID.fullmatch(call["id"]), call["id"]
                call["id"] = "<call id>"
        out.append(chunk)
    return out


def event(*parts: dict[str, Any], finish: str | None = None, **fields: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "responseId": "r1", **fields}


def deltas(chunks: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
    return [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chunks]


@pytest.mark.parametrize("name", ["stream_text.json", "stream_function_call.json"])
def test_documented_streams_give_the_expected_chunks(name: str) -> None:
    case = json.loads((FIXTURES / name).read_text())
    translator = GeminiStreamToChat(model=case["model"], include_usage=case["include_usage"])
    assert normalised(run(translator, case["events"])) == case["chunks"]
    assert translator.finished


def test_text_a_call_the_finish_and_usage_come_out_as_chat_chunks() -> None:
    translator = GeminiStreamToChat(model="chat", include_usage=True)
    usage_1 = {"promptTokenCount": 10, "candidatesTokenCount": 1, "totalTokenCount": 11}
    usage_2 = {"promptTokenCount": 10, "candidatesTokenCount": 9, "totalTokenCount": 19}
    call = {"functionCall": {"name": "lookup", "args": {"q": "x", "n": 2}}}
    first = translator.feed(event({"text": "Hel"}, usageMetadata=usage_1))
    assert not translator.finished
    rest = translator.feed(event({"text": "lo"}, call, usageMetadata=usage_2))
    assert not translator.finished
    last = translator.feed(event(finish="STOP", usageMetadata=usage_2))
    assert translator.finished
    chunks = first + rest + last + translator.finish()
    head = {"id": "chatcmpl-r1", "object": "chat.completion.chunk", "model": "chat"}
    call_id = rest[1]["choices"][0]["delta"]["tool_calls"][0]["id"]
    expected_call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q":"x","n":2}'},
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "created": translator.created, "choices": [choice], "usage": None}

    assert chunks == [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({"tool_calls": [expected_call]}),
        chunk({}, "tool_calls"),
        {
            **head,
            "created": translator.created,
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 9,
                "total_tokens": 19,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        },
    ]
    assert CALL_ID.fullmatch(call_id)
    assert translator.usage == chunks[-1]["usage"]


def test_tool_calls_are_numbered_across_events() -> None:
    translator = GeminiStreamToChat(model="m", include_usage=False)
    calls = [{"functionCall": {"name": f"f{i}", "args": {}}} for i in range(3)]
    chunks = run(translator, [event(calls[0], calls[1]), event(calls[2], finish="STOP")])
    numbered = [
        (d["tool_calls"][0]["index"], d["tool_calls"][0]["function"]["name"])
        for d, _ in deltas(chunks)
        if "tool_calls" in d
    ]
    assert numbered == [(0, "f0"), (1, "f1"), (2, "f2")]
    assert deltas(chunks)[-1] == ({}, "tool_calls")


def test_without_include_usage_there_is_no_usage_anywhere() -> None:
    translator = GeminiStreamToChat(model="m", include_usage=False)
    usage = {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}
    chunks = run(translator, [event({"text": "hi"}, finish="MAX_TOKENS", usageMetadata=usage)])
    assert all("usage" not in chunk for chunk in chunks)
    assert deltas(chunks) == [
        ({"role": "assistant", "content": ""}, None),
        ({"content": "hi"}, None),
        ({}, "length"),
    ]
    assert translator.usage is not None
    assert translator.usage["total_tokens"] == 5


def test_thoughts_and_empty_signature_parts_are_reasoning_not_content() -> None:
    translator = GeminiStreamToChat(model="m", include_usage=False)
    chunks = run(
        translator,
        [
            event({"text": "Let me think", "thought": True, "thoughtSignature": "c2lnMQ"}),
            event({"text": "Answer"}),
            event({"text": "", "thoughtSignature": "c2ln"}, finish="STOP"),
        ],
    )
    google = "google-gemini-v1"
    thought = {"type": "reasoning.text", "text": "Let me think", "signature": "c2lnMQ"}
    assert deltas(chunks) == [
        ({"role": "assistant", "content": ""}, None),
        (
            {
                "reasoning_details": [{**thought, "format": google}],
                "reasoning_content": "Let me think",
            },
            None,
        ),
        ({"content": "Answer"}, None),
        (
            {
                "reasoning_details": [
                    {"type": "reasoning.encrypted", "data": "c2ln", "format": google}
                ]
            },
            None,
        ),
        ({}, "stop"),
    ]


def test_a_filtered_answer_finishes_with_content_filter_and_later_events_add_nothing() -> None:
    translator = GeminiStreamToChat(model="m", include_usage=False)
    chunks = run(translator, [event({"text": "Once"}), event(finish="SAFETY")])
    assert deltas(chunks)[-1] == ({}, "content_filter")
    assert translator.finished
    assert translator.feed(event({"text": "more"}, finish="STOP")) == []


def test_a_blocked_prompt_is_an_empty_answer_filtered() -> None:
    translator = GeminiStreamToChat(model="m", include_usage=True)
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
        "responseId": "b1",
    }
    chunks = run(translator, [blocked])
    assert deltas(chunks[:-1]) == [
        ({"role": "assistant", "content": ""}, None),
        ({}, "content_filter"),
    ]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == 7
    assert {chunk["id"] for chunk in chunks} == {"chatcmpl-b1"}
    assert translator.finished


def test_a_stream_cut_short_is_not_finished_and_without_usage_finish_adds_nothing() -> None:
    translator = GeminiStreamToChat(model="m", include_usage=True)
    translator.feed(event({"text": "partial"}))
    assert not translator.finished
    assert translator.usage is None
    assert translator.finish() == []


def test_several_candidates_stream_as_several_choices() -> None:
    translator = GeminiStreamToChat(model="m", include_usage=False)
    both = {
        "candidates": [
            {"content": {"parts": [{"text": "a"}]}, "index": 0, "finishReason": "STOP"},
            {"content": {"parts": [{"text": "b"}]}, "index": 1},
        ]
    }
    chunks = translator.feed(both)
    assert not translator.finished
    chunks += translator.feed({"candidates": [{"index": 1, "finishReason": "STOP"}]})
    assert translator.finished
    per_choice = [(c["choices"][0]["index"], c["choices"][0]["finish_reason"]) for c in chunks]
    assert per_choice == [(0, None), (0, None), (0, "stop"), (1, None), (1, None), (1, "stop")]
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", chunks[0]["id"])
