"""Chat answers as Gemini's (protocols/gemini_chat_answer.py and gemini_chat_stream.py): whole
completions, and streams fed chunk by chunk as a provider sends them."""

from __future__ import annotations

from typing import Any

import orjson

from llmrelay.protocols import gemini_reasoning
from llmrelay.protocols.gemini_chat_answer import chat_response_to_gemini, usage_metadata
from llmrelay.protocols.gemini_chat_stream import ChatStreamToGemini

USAGE = {
    "prompt_tokens": 10,
    "completion_tokens": 7,
    "total_tokens": 17,
    "prompt_tokens_details": {"cached_tokens": 4},
    "completion_tokens_details": {"reasoning_tokens": 3},
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "run_shell_command", "arguments": '{"command": "echo hi"}'},
}


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": USAGE,
    }


def test_usage_metadata_counts_thinking_apart() -> None:
    assert usage_metadata(USAGE) == {
        "promptTokenCount": 10,
        "candidatesTokenCount": 4,
        "totalTokenCount": 17,
        "cachedContentTokenCount": 4,
        "thoughtsTokenCount": 3,
    }
    assert usage_metadata(None) is None


def test_a_text_answer() -> None:
    answer = chat_response_to_gemini(
        completion({"role": "assistant", "content": "hello"}), model="m", include_thoughts=False
    )
    assert answer == {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "hello"}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": usage_metadata(USAGE),
        "modelVersion": "m",
        "responseId": "abc",
    }


def test_tool_calls_with_their_ids_and_a_cut_answer() -> None:
    answer = chat_response_to_gemini(
        completion({"role": "assistant", "content": None, "tool_calls": [CALL]}, "tool_calls"),
        model="m",
        include_thoughts=False,
    )
    assert answer["candidates"][0]["content"]["parts"] == [
        {
            "functionCall": {
                "name": "run_shell_command",
                "args": {"command": "echo hi"},
                "id": "call_1",
            }
        }
    ]
    assert answer["candidates"][0]["finishReason"] == "STOP"
    cut = chat_response_to_gemini(
        completion({"role": "assistant", "content": "half"}, "length"),
        model="m",
        include_thoughts=False,
    )
    assert cut["candidates"][0]["finishReason"] == "MAX_TOKENS"


def test_reasoning_is_shown_when_asked_and_packed_onto_the_first_call() -> None:
    details = [
        {
            "type": "reasoning.text",
            "text": "think",
            "signature": "s1",
            "format": "anthropic-claude-v1",
        }
    ]
    message = {
        "role": "assistant",
        "content": "ok",
        "reasoning_content": "think",
        "reasoning_details": details,
        "tool_calls": [CALL],
    }
    shown = chat_response_to_gemini(completion(message), model="m", include_thoughts=True)
    parts = shown["candidates"][0]["content"]["parts"]
    assert parts[0] == {"text": "think", "thought": True}
    assert parts[1] == {"text": "ok"}
    assert gemini_reasoning.unpack(parts[2]["thoughtSignature"]) == details
    hidden = chat_response_to_gemini(completion(message), model="m", include_thoughts=False)
    parts = hidden["candidates"][0]["content"]["parts"]
    assert [p.get("thought") for p in parts] == [None, None]
    assert "thoughtSignature" in parts[1] and "functionCall" in parts[1]
    no_call = dict(message, tool_calls=None)
    only_text = chat_response_to_gemini(completion(no_call), model="m", include_thoughts=False)
    part = only_text["candidates"][0]["content"]["parts"][0]
    assert part["text"] == "ok" and gemini_reasoning.unpack(part["thoughtSignature"]) == details


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_a_streamed_text_answer_ends_with_finish_and_usage_together() -> None:
    stream = ChatStreamToGemini(model="m", include_thoughts=False)
    events = stream.feed(chunk({"role": "assistant", "content": ""}))
    events += stream.feed(chunk({"content": "hel"}))
    events += stream.feed(chunk({"content": "lo"}))
    events += stream.feed(chunk({}, "stop"))
    assert [e["candidates"][0]["content"]["parts"] for e in events] == [
        [{"text": "hel"}],
        [{"text": "lo"}],
    ]
    last = stream.feed({"id": "chatcmpl-s", "choices": [], "usage": USAGE})
    assert last == [
        {
            "candidates": [
                {"content": {"role": "model", "parts": []}, "index": 0, "finishReason": "STOP"}
            ],
            "modelVersion": "m",
            "responseId": "s",
            "usageMetadata": usage_metadata(USAGE),
        }
    ]
    assert stream.finish() == []


def test_streamed_tool_calls_go_out_whole_at_the_end() -> None:
    stream = ChatStreamToGemini(model="m", include_thoughts=True)
    events = stream.feed(chunk({"reasoning_content": "hmm"}))
    events += stream.feed(
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": "hm", "format": "x"}]})
    )
    events += stream.feed(
        chunk(
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "m", "signature": "S", "format": "x"}
                ]
            }
        )
    )
    first = {
        "index": 0,
        "id": "call_9",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    events += stream.feed(chunk({"tool_calls": [first]}))
    events += stream.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}))
    events += stream.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}))
    events += stream.feed(chunk({}, "tool_calls"))
    assert [e["candidates"][0]["content"]["parts"] for e in events] == [
        [{"text": "hmm", "thought": True}]
    ]
    last = stream.finish()  # the stream ended without a usage chunk
    assert len(last) == 1 and "usageMetadata" not in last[0]
    (part,) = last[0]["candidates"][0]["content"]["parts"]
    assert part["functionCall"] == {"name": "f", "args": {"a": 1}, "id": "call_9"}
    assert gemini_reasoning.unpack(part["thoughtSignature"]) == [
        {"type": "reasoning.text", "text": "hmm", "signature": "S", "format": "x"}
    ]
    assert last[0]["candidates"][0]["finishReason"] == "STOP"


def test_a_stream_cut_before_its_finish_gets_no_last_event() -> None:
    stream = ChatStreamToGemini(model="m", include_thoughts=False)
    stream.feed(chunk({"content": "par"}))
    assert stream.finish() == []


def test_the_events_are_json() -> None:
    stream = ChatStreamToGemini(model="m", include_thoughts=False)
    events = stream.feed(chunk({"content": "x"}, "stop")) + stream.finish()
    assert all(orjson.loads(orjson.dumps(e)) == e for e in events)
