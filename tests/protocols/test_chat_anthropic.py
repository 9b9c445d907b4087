import json
from pathlib import Path
from typing import Any

import pytest

from llmrelay.protocols.anthropic_request import anthropic_request_to_chat
from llmrelay.protocols.chat_anthropic import (
    DEFAULT_MAX_TOKENS,
    anthropic_response_to_chat,
    chat_request_to_anthropic,
    chat_response_to_anthropic,
)
from llmrelay.protocols.translation import TranslationError

FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "virtual", "messages": list(messages), **fields}


def to_anthropic(payload: dict[str, Any]) -> dict[str, Any]:
    body, _ = chat_request_to_anthropic(payload, upstream_model="claude")
    return body


def to_chat(payload: dict[str, Any]) -> dict[str, Any]:
    body, _ = anthropic_request_to_chat(payload, upstream_model="gpt")
    return body


USER = {"role": "user", "content": "hi"}


def messages_request(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 100, "messages": list(messages), **fields}


# --- golden fixtures (examples from the Anthropic and OpenAI docs)


@pytest.mark.parametrize("name", ["response_text.json", "response_tool_use.json"])
def test_anthropic_response_to_chat_golden(name: str) -> None:
    fixture = load(name)
    result = anthropic_response_to_chat(fixture["anthropic"], model=fixture["model"])
    assert isinstance(result.pop("created"), int)
    assert result == fixture["chat"]


@pytest.mark.parametrize("name", ["chat_response_text.json", "chat_response_tool_calls.json"])
def test_chat_response_to_anthropic_golden(name: str) -> None:
    fixture = load(name)
    assert (
        chat_response_to_anthropic(fixture["chat"], model=fixture["model"]) == fixture["anthropic"]
    )


def test_chat_request_to_anthropic_golden() -> None:
    fixture = load("request_chat_to_anthropic.json")
    body, dropped = chat_request_to_anthropic(
        fixture["chat"], upstream_model=fixture["upstream_model"]
    )
    assert body == fixture["anthropic"]
    assert dropped == fixture["dropped"]


def test_anthropic_request_to_chat_golden() -> None:
    fixture = load("request_anthropic_to_chat.json")
    body, dropped = anthropic_request_to_chat(
        fixture["anthropic"], upstream_model=fixture["upstream_model"]
    )
    assert body == fixture["chat"]
    assert dropped == fixture["dropped"]


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ({"type": "function", "function": {"name": "f"}}, {"type": "tool", "name": "f"}),
    ],
)
def test_tool_choice(choice: Any, expected: dict[str, Any]) -> None:
    body = to_anthropic(chat(USER, tools=[TOOL], tool_choice=choice))
    assert body["tool_choice"] == expected
    assert body["tools"] == [{"name": "f", "input_schema": {"type": "object"}}]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", {"type": "any", "disable_parallel_tool_use": True}),
        ("none", {"type": "none"}),
    ],
)
def test_parallel_tool_calls_false(choice: Any, expected: dict[str, Any]) -> None:
    body = to_anthropic(chat(USER, tools=[TOOL], tool_choice=choice, parallel_tool_calls=False))
    assert body["tool_choice"] == expected


def test_a_tool_without_parameters_gets_an_empty_object_schema() -> None:
    tool = {"type": "function", "function": {"name": "now", "description": "the time"}}
    body = to_anthropic(chat(USER, tools=[tool]))
    assert body["tools"] == [
        {
            "name": "now",
            "description": "the time",
            "input_schema": {"type": "object", "properties": {}},
        }
    ]
    assert "tool_choice" not in body


def test_max_tokens() -> None:
    assert to_anthropic(chat(USER))["max_tokens"] == DEFAULT_MAX_TOKENS
    assert to_anthropic(chat(USER, max_tokens=50))["max_tokens"] == 50
    assert to_anthropic(chat(USER, max_tokens=50, max_completion_tokens=70))["max_tokens"] == 70


def test_sampling_stop_stream_and_user() -> None:
    body = to_anthropic(chat(USER, temperature=0.2, top_p=0.9, stop="END", stream=True, user="u1"))
    assert body["temperature"] == 0.2
    assert body["top_p"] == 0.9
    assert body["stop_sequences"] == ["END"]
    assert body["stream"] is True
    assert body["metadata"] == {"user_id": "u1"}


def test_harmless_fields_are_reported_as_dropped() -> None:
    payload = chat(
        USER,
        frequency_penalty=0.5,
        presence_penalty=0.1,
        logit_bias={"50256": -100},
        seed=1,
        n=1,
        logprobs=False,
        store=True,
        stream_options={"include_usage": True},
        x_vendor_hint="fast",
    )
    body, dropped = chat_request_to_anthropic(payload, upstream_model="claude")
    assert dropped == [
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "seed",
        "n",
        "logprobs",
        "store",
        "x_vendor_hint",
    ]
    assert set(body) == {"model", "messages", "max_tokens"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("logprobs", True),
        ("top_logprobs", 3),
        ("response_format", {"type": "json_object"}),
        ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("modalities", ["text", "audio"]),
        ("functions", [{"name": "f"}]),
        ("reasoning_effort", "maximal"),
        ("temperature", 1.5),
        ("max_tokens", 0),
    ],
)
def test_what_cannot_be_honoured_is_refused(field: str, value: Any) -> None:
    with pytest.raises(TranslationError) as caught:
        chat_request_to_anthropic(chat(USER, **{field: value}), upstream_model="claude")
    assert caught.value.param == field


# --- Anthropic request -> Chat (request fields)


@pytest.mark.parametrize(
    ("choice", "expected_choice", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
        ({"type": "none"}, "none", None),
        ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}, None),
    ],
)
def test_tool_choice_back(choice: dict[str, Any], expected_choice: Any, parallel: Any) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    body = to_chat(messages_request(USER, tools=tools, tool_choice=choice))
    assert body["tool_choice"] == expected_choice
    assert body.get("parallel_tool_calls") == parallel
    assert body["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    ]


def test_stream_asks_for_usage() -> None:
    assert to_chat(messages_request(USER, stream=True))["stream_options"] == {"include_usage": True}
    assert "stream_options" not in to_chat(messages_request(USER, stream=False))


def test_disabled_thinking_is_accepted() -> None:
    body, dropped = anthropic_request_to_chat(
        messages_request(USER, thinking={"type": "disabled"}), upstream_model="gpt"
    )
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert dropped == []


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"thinking": {"type": "sometimes"}}, "thinking"),
        ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
        ({"output_config": {"format": {"type": "regex"}}}, "output_config.format"),
        ({"tools": [{"type": "computer_20250124", "name": "computer"}]}, "tools"),
        (
            {"mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}]},
            "mcp_servers",
        ),
        ({"tool_choice": {"type": "sometimes"}, "tools": [{"name": "f"}]}, "tool_choice"),
        ({"stop_sequences": "END"}, "stop_sequences"),
    ],
)
def test_anthropic_features_without_chat_equivalent_are_refused(
    fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(TranslationError) as caught:
        anthropic_request_to_chat(messages_request(USER, **fields), upstream_model="gpt")
    assert caught.value.param == param


# --- answers: stop reasons and usage


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        (None, "stop"),
    ],
)
def test_stop_reasons(stop_reason: str | None, finish_reason: str) -> None:
    body: dict[str, Any] = {"id": "msg_1", "content": [], "stop_reason": stop_reason}
    result = anthropic_response_to_chat(body, model="m")
    assert result["choices"][0]["finish_reason"] == finish_reason
    assert result["choices"][0]["message"]["content"] is None


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use"),
     ("content_filter", "refusal")],
)  # fmt: skip
def test_finish_reasons(finish_reason: str, stop_reason: str) -> None:
    body = {"id": "chatcmpl-1", "choices": [{"message": {}, "finish_reason": finish_reason}]}
    assert chat_response_to_anthropic(body, model="m")["stop_reason"] == stop_reason


def test_cache_buckets_reach_chat_usage() -> None:
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 200,
        "cache_read_input_tokens": 3000,
        "output_tokens": 7,
    }
    body = {"id": "msg_1", "content": [{"type": "text", "text": "ok"}], "usage": usage}
    assert anthropic_response_to_chat(body, model="m")["usage"] == {
        "prompt_tokens": 3210,
        "completion_tokens": 7,
        "total_tokens": 3217,
        "prompt_tokens_details": {"cached_tokens": 3000},
        "cache_creation_input_tokens": 200,
        "cache_read_input_tokens": 3000,
    }


def test_cached_tokens_reach_anthropic_usage() -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 800},
    }
    body = {"id": "chatcmpl-x", "choices": [{"message": {"content": "hi"}}], "usage": usage}
    assert chat_response_to_anthropic(body, model="m")["usage"] == {
        "input_tokens": 200,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 800,
    }


def test_malformed_provider_arguments_are_not_blamed_on_the_client() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": '}}
    body = {"id": "chatcmpl-x", "choices": [{"message": {"tool_calls": [call]}}]}
    with pytest.raises(TranslationError) as caught:
        chat_response_to_anthropic(body, model="m")
    assert caught.value.param is None
