"""Reasoning round trips between an Anthropic client and a provider reached through chat: a
chat answer's reasoning comes back as signed thinking blocks (whole or streamed), and the
next turn's thinking blocks go back upstream as the provider's own reasoning."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from llmrelay.protocols.anthropic_chat_stream import ChatStreamToAnthropic
from llmrelay.protocols.anthropic_reasoning import PREFIX, unpack, without_own_thinking
from llmrelay.protocols.anthropic_request import anthropic_request_to_chat
from llmrelay.protocols.chat_anthropic import chat_response_to_anthropic

GEMINI_DETAIL = {"type": "reasoning.text", "text": "Plan.", "signature": "c2ln", "format": "g"}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "Bash", "arguments": '{"command": "ls"}'},
    "extra_content": {"google": {"thought_signature": "Y2FsbHNpZw=="}},
}


def completion(message: dict[str, Any]) -> dict[str, Any]:
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    usage = {"prompt_tokens": 5, "completion_tokens": 7}
    return {"id": "chatcmpl-1", "choices": [choice], "usage": usage}


def next_turn(content: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat request for the turn after an answer of `content` (its tool run)."""
    result = {"type": "tool_result", "tool_use_id": "call_1", "content": "a.txt"}
    payload = {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "list"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": [result]},
        ],
    }
    body, dropped = anthropic_request_to_chat(payload, upstream_model="u")
    assert "messages.content.thinking" not in dropped
    return body


def test_reasoning_content_comes_back_as_a_signed_thinking_block_and_goes_back_up() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "I should list the files.",
        "tool_calls": [copy.deepcopy(CALL)],
    }
    answer = chat_response_to_anthropic(completion(message), model="v")
    thinking, use = answer["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"] == "I should list the files."
    assert thinking["signature"].startswith(PREFIX)
    assert use["type"] == "tool_use" and use["id"] == "call_1"
    back = next_turn(answer["content"])["messages"][1]
    assert back["reasoning_content"] == "I should list the files."
    assert back["tool_calls"][0]["extra_content"] == CALL["extra_content"]


def test_omitted_display_hides_the_text_but_the_signature_keeps_it() -> None:
    message = {"role": "assistant", "content": "done", "reasoning_content": "secret"}
    answer = chat_response_to_anthropic(completion(message), model="v", display="omitted")
    assert answer["content"][0]["thinking"] == ""
    assert unpack(answer["content"][0]["signature"]) == {"text": "secret"}


def test_no_thinking_blocks_when_the_client_turned_thinking_off() -> None:
    message = {"role": "assistant", "content": "done", "reasoning_content": "hmm"}
    answer = chat_response_to_anthropic(completion(message), model="v", thinking=False)
    assert [b["type"] for b in answer["content"]] == ["text"]


def test_thinking_anthropic_signed_is_dropped_by_name() -> None:
    content = [
        {"type": "thinking", "thinking": "hmm", "signature": "EqQBCkYIBxgCKkA"},
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "text", "text": "ok"},
    ]
    payload = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": "b"},
        ],
    }
    body, dropped = anthropic_request_to_chat(payload, upstream_model="u")
    assert body["messages"][1] == {"role": "assistant", "content": "ok"}
    assert dropped == ["messages.content.thinking"]


def test_a_turn_of_thinking_alone_still_carries_it() -> None:
    message = {"role": "assistant", "content": None, "reasoning_content": "only this"}
    answer = chat_response_to_anthropic(completion(message), model="v")
    payload = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": "b"},
        ],
    }
    body, _ = anthropic_request_to_chat(payload, upstream_model="u")
    assert body["messages"][1] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "only this",
    }


# --- streamed


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def accumulate(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The message content an Anthropic SDK builds from a stream's events."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for _, event in events:
        index: int = event.get("index", -1)
        if event["type"] == "content_block_start":
            blocks[index] = dict(event["content_block"])
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            block = blocks[index]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial[index] = partial.get(index, "") + delta["partial_json"]
    for index, raw in partial.items():
        blocks[index]["input"] = orjson.loads(raw)
    return [blocks[i] for i in sorted(blocks)]


def run(chunks: list[dict[str, Any]], **options: Any) -> list[tuple[str, dict[str, Any]]]:
    translator = ChatStreamToAnthropic(model="v", message_id="msg_1", **options)
    events = []
    for piece in chunks:
        events += translator.feed(piece)
    return events + translator.finish()


def test_a_streamed_answers_reasoning_round_trips_with_a_late_tool_signature() -> None:
    head = {**CALL, "index": 0, "function": {"name": "Bash", "arguments": ""}}
    events = run(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning_content": "I should "}),
            chunk({"reasoning_content": "list.", "reasoning_details": [GEMINI_DETAIL]}),
            chunk({"content": "Listing."}),
            chunk({"tool_calls": [head]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"command": "ls"}'}}]}),
            chunk({}, "tool_calls"),
            {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}},
        ]
    )
    kinds = [e[0] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    content = accumulate(events)
    assert [b["type"] for b in content] == ["thinking", "text", "tool_use", "thinking"]
    assert content[0]["thinking"] == "I should list."
    assert content[2]["input"] == {"command": "ls"}
    back = next_turn(content)["messages"][1]
    assert back["content"] == "Listing."
    assert back["reasoning_content"] == "I should list."
    assert back["reasoning_details"] == [GEMINI_DETAIL]
    assert back["tool_calls"][0]["extra_content"] == CALL["extra_content"]


def test_omitted_display_streams_no_thinking_text() -> None:
    events = run(
        [chunk({"reasoning_content": "secret"}), chunk({"content": "hi"}, "stop")],
        display="omitted",
    )
    deltas = [e[1]["delta"]["type"] for e in events if e[0] == "content_block_delta"]
    assert deltas == ["signature_delta", "text_delta"]
    assert unpack(accumulate(events)[0]["signature"]) == {"text": "secret"}


def test_a_stream_without_reasoning_has_no_thinking_block() -> None:
    content = accumulate(run([chunk({"content": "hi"}, "stop")]))
    assert content == [{"type": "text", "text": "hi"}]
    off = run([chunk({"reasoning_content": "x"}), chunk({"content": "hi"}, "stop")], thinking=False)
    assert accumulate(off) == [{"type": "text", "text": "hi"}]


def test_an_anthropic_provider_gets_no_thinking_llmrelay_signed() -> None:
    message = {"role": "assistant", "content": "ok", "reasoning_content": "mine"}
    ours = chat_response_to_anthropic(completion(message), model="v")["content"]
    theirs = {"type": "thinking", "thinking": "t", "signature": "EqQBCkYIBxgCKkA"}
    payload = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": ours},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": [theirs, {"type": "text", "text": "x"}]},
            {"role": "user", "content": "c"},
        ],
    }
    before = copy.deepcopy(payload)
    stripped = without_own_thinking(payload)
    assert stripped is not None
    assert stripped["messages"][1]["content"] == [{"type": "text", "text": "ok"}]
    assert stripped["messages"][3] is payload["messages"][3]  # Anthropic's own: kept
    assert payload == before  # a later attempt on a translated route still has them
    assert without_own_thinking(stripped) is None
