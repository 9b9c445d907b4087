"""Reasoning round trips for a Responses client of an Anthropic or a Gemini provider, through
the chat hub: the provider's thinking (Anthropic thinking blocks and their signatures, Gemini
thought signatures) comes to the client as a reasoning item whose encrypted_content it sends
back, and the next turn's request to the provider carries it as the provider wrote it."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import ResponseFunctionToolCall, ResponseReasoningItem

from llmrelay.protocols import chat_anthropic_thinking, gemini, responses_reasoning
from llmrelay.protocols.chat_anthropic import anthropic_response_to_chat, chat_request_to_anthropic
from llmrelay.protocols.chat_anthropic_stream import AnthropicStreamToChat
from llmrelay.protocols.chat_gemini import chat_request_to_gemini
from llmrelay.protocols.chat_gemini_stream import GeminiStreamToChat
from llmrelay.protocols.responses_chat import chat_response_to_responses, responses_request_to_chat
from llmrelay.protocols.translation import TranslationError
from tests.protocols.test_responses_chat_stream import judged, run

CAPTURED = Path(__file__).parents[1] / "agents" / "captured"
SIGNATURE = "EqQBCkYIBxgCKkDsignature"


def codex_request() -> dict[str, Any]:
    """Codex's first request of the tool task, with a reasoning effort (Codex sends one
    when its model has one configured)."""
    exchanges = json.loads((CAPTURED / "codex-tool.json").read_text())["exchanges"]
    body: dict[str, Any] = copy.deepcopy(exchanges[0]["body"])
    body["reasoning"] = {"effort": "medium", "summary": "auto"}
    return body


def anthropic_message() -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [
            {"type": "thinking", "thinking": "Run it first.", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "cmVkYWN0ZWQ="},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "exec_command",
                "input": {"cmd": "echo hi"},
            },
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def next_turn(request: dict[str, Any], output: list[dict[str, Any]]) -> dict[str, Any]:
    """Codex's next request: its history with the answer's items and the command's output."""
    call = next(item for item in output if item["type"] == "function_call")
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "hi\n"}
    return {**request, "input": [*request["input"], *output, result]}


def to_anthropic(request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    chat, dropped = responses_request_to_chat(copy.deepcopy(request), upstream_model="claude")
    body, more = chat_request_to_anthropic(chat, upstream_model="claude")
    return body, dropped + more


# --- Anthropic


def test_a_thinking_budget_for_codexs_effort() -> None:
    body, dropped = to_anthropic(codex_request())
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert body["max_tokens"] == 4096 + 8192
    assert "reasoning_effort" not in dropped


def test_anthropic_thinking_round_trips_through_a_responses_client() -> None:
    request = codex_request()
    chat = anthropic_response_to_chat(anthropic_message(), model="claude")
    assert chat["choices"][0]["message"]["reasoning_content"] == "Run it first."
    response = chat_response_to_responses(chat, model="virtual", request=request)
    reasoning, call = response["output"]
    assert reasoning["type"] == "reasoning"
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Run it first."}]
    assert reasoning["encrypted_content"].startswith(responses_reasoning.PREFIX)
    assert call["type"] == "function_call" and call["call_id"] == "toolu_1"
    body, dropped = to_anthropic(next_turn(request, response["output"]))
    assistant = body["messages"][-2]
    assert assistant["role"] == "assistant"
    assert assistant["content"][:3] == [
        {"type": "thinking", "thinking": "Run it first.", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": "cmVkYWN0ZWQ="},
        {"type": "tool_use", "id": "toolu_1", "name": "exec_command", "input": {"cmd": "echo hi"}},
    ]
    assert body["thinking"]["type"] == "enabled"  # the loop goes on thinking
    assert "input.reasoning" not in dropped and "reasoning_details" not in dropped


def anthropic_events() -> list[tuple[str, dict[str, Any]]]:
    block = {"type": "thinking", "thinking": "", "signature": ""}
    call = {"type": "tool_use", "id": "toolu_1", "name": "exec_command", "input": {}}
    deltas = [
        (0, {"type": "thinking_delta", "thinking": "Run "}),
        (0, {"type": "thinking_delta", "thinking": "it."}),
        (0, {"type": "signature_delta", "signature": SIGNATURE}),
        (1, {"type": "input_json_delta", "partial_json": '{"cmd": "echo hi"}'}),
    ]
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": {**anthropic_message(), "content": [], "usage": {}}}),
        ("content_block_start", {"index": 0, "content_block": block}),
        *[("content_block_delta", {"index": i, "delta": d}) for i, d in deltas[:3]],
        ("content_block_stop", {"index": 0}),
        ("content_block_start", {"index": 1, "content_block": call}),
        ("content_block_delta", {"index": 1, "delta": deltas[3][1]}),
        ("content_block_stop", {"index": 1}),
        ("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ("message_stop", {}),
    ]
    return [(name, {"type": name, **data}) for name, data in events]


def test_streamed_thinking_becomes_a_reasoning_item_with_its_summary_streamed() -> None:
    request = codex_request()
    reader = AnthropicStreamToChat(model="claude", include_usage=True)
    chunks = [chunk for name, data in anthropic_events() for chunk in reader.feed(name, data)]
    events = run(chunks, request)
    kinds = [kind for kind, _ in events]
    assert kinds[2:5] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
    ]
    response = judged(events)
    reasoning, call = response.output
    assert reasoning.type == "reasoning" and call.type == "function_call"
    assert [part.text for part in reasoning.summary] == ["Run it."]
    packed = responses_reasoning.unpack(reasoning.encrypted_content)
    assert packed is not None
    assert [{k: v for k, v in d.items() if k != "index"} for d in packed.details] == [
        {
            "type": "reasoning.text",
            "text": "Run it.",
            "format": chat_anthropic_thinking.FORMAT,
            "signature": SIGNATURE,
        }
    ]
    output = [item.model_dump(exclude_none=True) for item in response.output]
    body, _ = to_anthropic(next_turn(request, output))
    assert body["messages"][-2]["content"][0] == {
        "type": "thinking",
        "thinking": "Run it.",
        "signature": SIGNATURE,
    }


def test_without_a_summary_asked_the_reasoning_text_stays_in_the_encrypted_content() -> None:
    request = {**codex_request(), "reasoning": {"effort": "low"}}
    chat = anthropic_response_to_chat(anthropic_message(), model="claude")
    reasoning = chat_response_to_responses(chat, model="virtual", request=request)["output"][0]
    assert reasoning["summary"] == []
    packed = responses_reasoning.unpack(reasoning["encrypted_content"])
    assert packed is not None and packed.details[0]["text"] == "Run it first."


@pytest.mark.parametrize(
    ("fields", "dropped_field"),
    [
        ({"tool_choice": {"type": "function", "name": "exec_command"}}, "reasoning_effort"),
        ({"max_output_tokens": 900}, "reasoning_effort"),
        ({"temperature": 0.2}, "temperature"),
    ],
)
def test_what_thinking_cannot_go_with(fields: dict[str, Any], dropped_field: str) -> None:
    body, dropped = to_anthropic({**codex_request(), **fields})
    assert dropped_field in dropped
    assert ("thinking" in body) is (dropped_field != "reasoning_effort")
    assert "temperature" not in body


def test_a_tool_loop_begun_without_thinking_goes_on_without() -> None:
    request = codex_request()
    message = anthropic_message()
    message["content"] = message["content"][2:]  # the call alone: no thinking came
    chat = anthropic_response_to_chat(message, model="claude")
    response = chat_response_to_responses(chat, model="virtual", request=request)
    body, dropped = to_anthropic(next_turn(request, response["output"]))
    assert "thinking" not in body and "reasoning_effort" in dropped


def test_an_effort_anthropic_has_no_budget_for_is_refused() -> None:
    with pytest.raises(TranslationError) as caught:
        to_anthropic({**codex_request(), "reasoning": {"effort": "unheard-of"}})
    assert caught.value.param == "reasoning_effort"


def test_reasoning_of_another_origin_is_left_out_and_named() -> None:
    request = codex_request()
    theirs = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"}
    request["input"] = [*request["input"], theirs, {"role": "assistant", "content": "Done."}]
    body, dropped = to_anthropic(request)
    assert "input.reasoning" in dropped
    assert body["messages"][-1] == {"role": "assistant", "content": "Done."}


# --- Gemini


def gemini_events() -> list[dict[str, Any]]:
    thought = {"text": "Run it.", "thought": True, "thoughtSignature": "t-sig"}
    call = {"functionCall": {"name": "exec_command", "args": {"cmd": "echo hi"}}}
    return [
        {"responseId": "r1", "candidates": [{"content": {"role": "model", "parts": [thought]}}]},
        {
            "responseId": "r1",
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{**call, "thoughtSignature": "c-sig"}]},
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3},
        },
    ]


def test_gemini_thought_signatures_round_trip_through_a_responses_client() -> None:
    request = codex_request()
    reader = GeminiStreamToChat(model="gemini", include_usage=True)
    chunks = [chunk for event in gemini_events() for chunk in reader.feed(event)]
    response = judged(run(chunks, request))
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "function_call", "reasoning"]
    call, last = response.output[1:]
    assert isinstance(call, ResponseFunctionToolCall) and isinstance(last, ResponseReasoningItem)
    late = responses_reasoning.unpack(last.encrypted_content)
    assert late is not None
    assert late.calls == {call.call_id: {"google": {"thought_signature": "c-sig"}}}
    output = [item.model_dump(exclude_none=True) for item in response.output]
    chat, dropped = responses_request_to_chat(next_turn(request, output), upstream_model="g")
    body, _ = chat_request_to_gemini(chat)
    model_turn = body["contents"][-2]
    assert model_turn["role"] == "model"
    thought, called = model_turn["parts"]
    assert thought == {"text": "Run it.", "thought": True, "thoughtSignature": "t-sig"}
    assert called["functionCall"]["name"] == "exec_command"
    assert called["thoughtSignature"] == "c-sig"  # not gemini.SKIP_SIGNATURE
    assert called["thoughtSignature"] != gemini.SKIP_SIGNATURE
    assert "input.reasoning" not in dropped
