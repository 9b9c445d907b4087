import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from openai.types.responses import Response

from llmrelay.protocols.responses_chat import (
    chat_response_to_responses,
    responses_request_to_chat,
)
from llmrelay.protocols.translation import TranslationError
from tests.protocols.responses_support import WEATHER, to_chat

FIXTURES = Path(__file__).parent / "fixtures" / "responses"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def completion(
    message: dict[str, Any], finish_reason: str = "stop", **extra: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-xyz",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "upstream",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        **extra,
    }


def to_response(body: dict[str, Any], request: dict[str, Any] | None = None) -> dict[str, Any]:
    """Translates, and has the openai SDK check the result is a Response it accepts."""
    response = chat_response_to_responses(body, model="virtual", request=request or {})
    Response.model_validate(response)
    return response


# --- golden fixtures (examples from the OpenAI docs)


@pytest.mark.parametrize(
    "name", ["request_function_calling.json", "request_structured_outputs.json"]
)
def test_request_golden(name: str) -> None:
    fixture = load(name)
    body, dropped = responses_request_to_chat(
        fixture["responses"], upstream_model=fixture["upstream_model"]
    )
    assert body == fixture["chat"]
    assert dropped == fixture["dropped"]


@pytest.mark.parametrize("name", ["response_text.json", "response_function_call.json"])
def test_response_golden(name: str) -> None:
    fixture = load(name)
    response = chat_response_to_responses(
        fixture["chat"], model=fixture["model"], request=fixture["request"]
    )
    assert isinstance(response.pop("completed_at"), int)
    assert response == fixture["response"]
    assert "output_text" not in response  # an SDK convenience, not part of the wire object
    response["completed_at"] = 0
    Response.model_validate(response)


def test_the_openai_client_reads_the_response() -> None:
    fixture = load("response_function_call.json")
    translated = chat_response_to_responses(
        fixture["chat"], model="virtual", request=fixture["request"]
    )
    seen: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(200, json=translated)

    with httpx2.Client(transport=httpx2.MockTransport(handler)) as http:
        client = openai.OpenAI(api_key="k", base_url="http://relay/v1", http_client=http)
        response = client.responses.create(**fixture["request"])
    # What the SDK sent is what the translator is given.
    body, _ = responses_request_to_chat(seen[0], upstream_model="upstream")
    assert body["tools"][0]["function"]["name"] == "get_current_weather"
    call = response.output[0]
    assert call.type == "function_call"
    assert (call.call_id, call.name) == ("call_abc123", "get_current_weather")
    assert response.usage is not None
    assert response.usage.input_tokens == 82
    assert response.output_text == ""


# --- request: fields


def test_sampling_stream_and_user() -> None:
    body, dropped = to_chat(
        max_output_tokens=256,
        temperature=0.5,
        top_p=0.9,
        stream=True,
        user="u-1",
        store=True,
        metadata={"k": "v"},
        service_tier="auto",
        prompt_cache_key="p",
        safety_identifier="s",
        truncation="disabled",
        background=False,
        include=["reasoning.encrypted_content"],
        stream_options={"include_obfuscation": False},
    )
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "model": "upstream",
        "max_tokens": 256,
        "temperature": 0.5,
        "top_p": 0.9,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "u-1",
        "prompt_cache_key": "p",  # Chat Completions has it too
    }
    assert set(dropped) == {
        "store",
        "metadata",
        "service_tier",
        "safety_identifier",
        "truncation",
        "background",
        "stream_options",
    }
    # store: false is honoured (nothing is kept), and the encrypted reasoning is included.
    _, dropped = to_chat(store=False, include=["reasoning.encrypted_content"])
    assert dropped == []


def test_tool_switches_without_tools_are_dropped() -> None:
    body, dropped = to_chat(tools=[], tool_choice="auto", parallel_tool_calls=False)
    assert "tools" not in body and "tool_choice" not in body and "parallel_tool_calls" not in body
    assert dropped == ["tool_choice", "parallel_tool_calls"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ({"format": {"type": "text"}}, None),
        ({"format": {"type": "json_object"}}, {"type": "json_object"}),
        (
            {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        ),
    ],
)
def test_text_format(text: dict[str, Any], expected: Any) -> None:
    body, _ = to_chat(text=text)
    assert body.get("response_format") == expected


def test_reasoning_effort_and_verbosity() -> None:
    body, dropped = to_chat(
        reasoning={"effort": "high", "summary": None}, text={"verbosity": "low"}
    )
    assert body["reasoning_effort"] == "high"
    assert "response_format" not in body
    assert dropped == ["text.verbosity"]


# --- request: what raises TranslationError


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"conversation": {"id": "conv_1"}}, "conversation"),
        ({"background": True}, "background"),
        ({"prompt": {"id": "pmpt_1", "version": "2"}}, "prompt"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"truncation": "auto"}, "truncation"),
        ({"top_logprobs": 5}, "top_logprobs"),
        ({"context_management": [{"type": "compaction"}]}, "context_management"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tools": [{"type": "custom"}]}, "tools"),
        ({"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "mcp"}]}]}, "tools"),
        ({"tools": [{"name": "no_type"}]}, "tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "web_search"}}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "mode": "auto"}},
            "tool_choice",
        ),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text"),
        ({"text": {"format": {"type": "grammar"}}}, "text"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"instructions": ["not", "a", "string"]}, "instructions"),
        ({"reasoning": "high"}, "reasoning"),
        ({"input": []}, "input"),
        ({"input": 42}, "input"),
    ],
)
def test_refused_fields(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(TranslationError) as caught:
        to_chat(**fields)
    assert caught.value.param == param


# --- response


def test_text_refusal_and_tool_calls_in_order() -> None:
    message = {
        "role": "assistant",
        "content": "Let me look.",
        "refusal": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": {"x": 1}}},
        ],
    }
    response = to_response(completion(message, "tool_calls"))
    assert [item["type"] for item in response["output"]] == [
        "message",
        "function_call",
        "function_call",
    ]
    assert [item["id"] for item in response["output"]] == ["msg_xyz", "fc_xyz_0", "fc_xyz_1"]
    assert response["output"][2]["arguments"] == '{"x":1}'
    assert response["status"] == "completed"
    refused = to_response(completion({"role": "assistant", "content": None, "refusal": "No."}))
    assert refused["output"][0]["content"] == [{"type": "refusal", "refusal": "No."}]


@pytest.mark.parametrize(
    ("finish_reason", "status", "details"),
    [
        ("stop", "completed", None),
        ("tool_calls", "completed", None),
        ("length", "incomplete", {"reason": "max_output_tokens"}),
        ("content_filter", "incomplete", {"reason": "content_filter"}),
    ],
)
def test_finish_reasons(finish_reason: str, status: str, details: Any) -> None:
    response = to_response(completion({"role": "assistant", "content": "Once upon"}, finish_reason))
    assert response["status"] == status
    assert response["incomplete_details"] == details
    assert response["output"][0]["status"] == ("completed" if details is None else "incomplete")
    assert (response["completed_at"] is None) == (details is not None)


def test_usage_and_echoed_request_settings() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 30,
        "total_tokens": 130,
        "prompt_tokens_details": {"cached_tokens": 60},
        "completion_tokens_details": {"reasoning_tokens": 12},
    }
    request = {
        "model": "virtual",
        "input": "hi",
        "instructions": "Be brief.",
        "max_output_tokens": 50,
        "temperature": 0.3,
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
        "metadata": {"k": "v"},
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_object"}},
        "user": "u-1",
        "store": True,
    }
    response = to_response(completion({"role": "assistant", "content": "{}"}, usage=usage), request)
    assert response["usage"] == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 0},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 130,
    }
    echoed = {key: response[key] for key in request if key not in ("input", "model")}
    assert echoed == {
        **{key: request[key] for key in echoed},
        "reasoning": {"effort": "low", "summary": None},
        "store": False,  # the gateway keeps nothing, whatever was asked
    }
    assert response["previous_response_id"] is None and response["error"] is None


def test_unknown_usage_stays_unknown() -> None:
    assert to_response(completion({"role": "assistant", "content": "x"}))["usage"] is None
